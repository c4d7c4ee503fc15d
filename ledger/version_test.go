package ledger

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// commandFieldPaths lists the JSON path of every field reachable from typ
// ("submit_tasks.tasks[].spec.argv"), with the since tag of each.
func commandFieldPaths(typ reflect.Type) map[string]int {
	out := map[string]int{}
	var walk func(t reflect.Type, prefix string, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, prefix string, seen map[reflect.Type]bool) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			if t.Kind() != reflect.Pointer {
				prefix += "[]"
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			path := prefix
			if name := jsonName(sf); name != "" {
				if path != "" {
					path += "."
				}
				path += name
				out[path] = sinceOf(t, sf)
			}
			walk(sf.Type, path, seen)
		}
	}
	walk(typ, "", map[reflect.Type]bool{})
	return out
}

// TestEveryNewFieldHasAVersion: the fields of version 1 are pinned in
// testdata/command-fields-v1.txt (written when versions were introduced;
// never to be regenerated). A field not in it must carry the since tag of
// the version that introduced it, or an older peer would take a command
// using it for garbage instead of a newer command; a field in it must not
// carry one, which would change the version old commands encode with.
func TestEveryNewFieldHasAVersion(t *testing.T) {
	b, err := os.ReadFile("testdata/command-fields-v1.txt")
	if err != nil {
		t.Fatal(err)
	}
	v1 := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		v1[line] = true
	}
	fields := commandFieldPaths(reflect.TypeFor[Command]())
	for path, since := range fields {
		switch {
		case v1[path] && since != CommandVersion:
			t.Errorf("field %s is of version 1 (testdata/command-fields-v1.txt) but carries since:\"%d\"", path, since)
		case !v1[path] && since == CommandVersion:
			t.Errorf("field %s is new since version 1: tag it since:\"N\" with the version that introduces it (ledger/version.go)", path)
		}
	}
	for path := range v1 {
		if _, ok := fields[path]; !ok {
			t.Errorf("field %s of version 1 is gone: old logs carrying it no longer decode", path)
		}
	}
	if MaxCommandVersion() < CommandVersion {
		t.Fatalf("MaxCommandVersion %d below %d", MaxCommandVersion(), CommandVersion)
	}
}

// A synthetic command tree with fields of later versions, to test the
// table and the walk without waiting for a real version 2 field.
type vtBody struct {
	A     int       `json:"a"`
	B     *vtInner  `json:"b,omitempty" since:"2"`
	Items []vtInner `json:"items,omitempty"`
}

type vtInner struct {
	X string            `json:"x"`
	Y int               `json:"y,omitempty" since:"3"`
	M map[string]vtLeaf `json:"m,omitempty"`
}

type vtLeaf struct {
	Z bool `json:"z,omitempty" since:"4"`
}

type vtRoot struct {
	V     int     `json:"v"`
	Plain *vtLeaf `json:"plain,omitempty"`
	Body  *vtBody `json:"body,omitempty"`
	Old   *struct {
		N int `json:"n"`
	} `json:"old,omitempty"`
}

func TestRequiredVersionWalk(t *testing.T) {
	table := newVersionTable(reflect.TypeFor[vtRoot]())
	if table.max != 4 {
		t.Fatalf("max %d, want 4", table.max)
	}
	if got := table.reach[reflect.TypeFor[struct {
		N int `json:"n"`
	}]()]; got != 1 {
		t.Fatalf("an untagged subtree reaches %d, want 1", got)
	}
	cases := []struct {
		name string
		root vtRoot
		want int
		path string
	}{
		{"empty", vtRoot{}, 1, ""},
		{"version 1 fields only", vtRoot{Body: &vtBody{A: 3, Items: []vtInner{{X: "x"}}}}, 1, ""},
		{"a version 2 field", vtRoot{Body: &vtBody{B: &vtInner{X: "x"}}}, 2, ".body.b"},
		{"a version 3 field inside a version 2 one", vtRoot{Body: &vtBody{B: &vtInner{Y: 1}}}, 3, ".body.b.y"},
		{"a version 3 field in a slice", vtRoot{Body: &vtBody{Items: []vtInner{{}, {Y: 2}}}}, 3, ".body.items[1].y"},
		{"a version 4 field in a map", vtRoot{Body: &vtBody{Items: []vtInner{{M: map[string]vtLeaf{"k": {Z: true}}}}}}, 4, ".body.items[0].m[k].z"},
		{"a zero newer field counts for nothing", vtRoot{Body: &vtBody{Items: []vtInner{{Y: 0, M: map[string]vtLeaf{"k": {}}}}}}, 1, ""},
		{"a tagged type reached through a version 1 field", vtRoot{Plain: &vtLeaf{Z: true}}, 4, ".plain.z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, path := table.required(reflect.ValueOf(tc.root))
			if got != tc.want || path != tc.path {
				t.Fatalf("required %d at %q, want %d at %q", got, path, tc.want, tc.path)
			}
		})
	}
}

func TestVersionTagMistakesPanic(t *testing.T) {
	type encodedWhenUnset struct {
		F int `json:"f" since:"2"`
	}
	type structWithOmitempty struct {
		F struct{ A int } `json:"f,omitempty" since:"2"`
	}
	type badTag struct {
		F int `json:"f,omitempty" since:"one"`
	}
	type versionOne struct {
		F int `json:"f,omitempty" since:"1"`
	}
	for name, typ := range map[string]reflect.Type{
		"encoded when unset":        reflect.TypeFor[encodedWhenUnset](),
		"struct with omitempty":     reflect.TypeFor[structWithOmitempty](),
		"not a number":              reflect.TypeFor[badTag](),
		"since 1 is no new version": reflect.TypeFor[versionOne](),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			newVersionTable(typ)
		})
	}
}

// TestGoldenCommandVersions: every pinned command (each kind, every
// optional field set somewhere) needs version 1 only, except the kinds
// added since (forget_tasks and job_policy: 2) and the commands using a
// field added since (a gang: 3), so that old logs
// decode and every build encodes them as before; an entry of a version
// above this build's is a newer command (NewerVersion), not garbage, and
// one below 1 is garbage.
func TestGoldenCommandVersions(t *testing.T) {
	// The kinds added since version 1, with the version that added them.
	since := map[Kind]int{KindForgetTasks: 2, KindJobPolicy: 2, KindReclaimMachine: 3, KindRetentionVote: 3, KindMigrateTask: 3, KindMachineLoad: 3}
	// The pinned commands of an older kind setting a field (or a value:
	// valueVersioned) added since.
	byName := map[string]int{"add_machine opportunistic": 3, "submit_tasks gang": 3, "submit_tasks with class and deadline": 3, "submit_tasks moldable": 3, "job_policy ehosep-easy": 3}
	for _, g := range goldenCommands() {
		c := g.cmd
		want := CommandVersion
		if v, ok := since[g.kind]; ok {
			want = v
		}
		if v, ok := byName[g.name]; ok {
			want = v
		}
		if n, path := RequiredVersion(&c); n != want {
			t.Errorf("%s: required version %d (%s), want %d", g.name, n, path, want)
		}
		if v, newer := NewerVersion([]byte(g.json)); v != want || newer {
			t.Errorf("%s: NewerVersion %d %v, want %d false", g.name, v, newer, want)
		}
	}
	next := MaxCommandVersion() + 1
	for _, tc := range []struct {
		raw   string
		v     int
		newer bool
	}{
		{`{"v":` + strconv.Itoa(next) + `,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1},"new_kind":{}}`, next, true},
		{`{"v":0,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1}}`, 0, false},
		{`{"org":"uni-a"}`, 0, false},
		{`not json`, 0, false},
	} {
		v, newer := NewerVersion([]byte(tc.raw))
		if v != tc.v || newer != tc.newer {
			t.Errorf("NewerVersion(%s) = %d %v, want %d %v", tc.raw, v, newer, tc.v, tc.newer)
		}
		if _, err := DecodeCommand([]byte(tc.raw)); err == nil {
			t.Errorf("DecodeCommand(%s) accepted", tc.raw)
		} else if tc.newer && CodeOf(err) != CodeBadVersion {
			t.Errorf("DecodeCommand(%s): %v, want bad_version", tc.raw, err)
		}
	}
}
