package ledger

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Command versions (docs/LEDGER.md, "Versions and upgrades").
//
// Every kind and field that existed when versions were introduced is of
// version 1 (CommandVersion), listed in testdata/command-fields-v1.txt. A
// kind or field added later carries the version that introduced it in a
// `since:"N"` tag, and must be omitted when unset (omitempty or omitzero),
// so that a command that does not use it encodes as before:
//
//	Retention *Retention `json:"retention,omitempty" since:"2"`
//
// A command's "v" is the highest version among the fields it actually
// sets (EncodeCommand writes it): a command made of version-1 fields says
// 1 whichever build encodes it, so older peers keep applying it. A peer
// applies every version up to MaxCommandVersion, the highest tag this
// build knows. An entry of a higher version is not garbage but a command
// of a newer build: consensus stops applying the log there rather than
// skip it and diverge (NewerVersion), and the leader commits no command
// whose version a member does not apply (leader/admit.go).

// commandVersions is the version table of Command, built once and never
// changed.
var commandVersions = newVersionTable(reflect.TypeFor[Command]())

// MaxCommandVersion is the highest command version this ledger applies.
func MaxCommandVersion() int { return commandVersions.max }

// RequiredVersion is the lowest command version that knows every field c
// sets, and the JSON path of a field of that version ("" for version 1).
func RequiredVersion(c *Command) (int, string) {
	n, path := commandVersions.required(reflect.ValueOf(c).Elem())
	return n, strings.TrimPrefix(path, ".")
}

// NewerVersion reports whether data is a command entry of a version above
// MaxCommandVersion, and which: a command of a newer build, which this
// ledger must not skip (Apply rejects it with CodeBadVersion like any
// other version it does not apply). It parses the whole entry, so callers
// ask only about entries Apply rejected with CodeBadVersion.
func NewerVersion(data []byte) (int, bool) {
	var hdr struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(data, &hdr); err != nil || hdr.V == nil {
		return 0, false
	}
	return *hdr.V, *hdr.V > MaxCommandVersion()
}

// NewerVersionError says an entry is a command of a newer build than this
// ledger: ApplyKnown refused to pass it.
type NewerVersionError struct {
	Index   uint64
	Version int
}

func (e *NewerVersionError) Error() string {
	return fmt.Sprintf("log entry %d is command version %d, and this peer applies versions up to %d", e.Index, e.Version, MaxCommandVersion())
}

// ApplyKnown is Apply for a replica that must not skip what it does not
// know: an entry of a newer command version (NewerVersion) is neither
// applied nor passed (the applied index stays below it, the state is
// unchanged), and the error says so; the caller stops applying the log
// there. Every other entry is Apply's, with its Result.
func (l *Ledger) ApplyKnown(index uint64, data []byte) (Result, error) {
	prev := l.applied
	res := l.Apply(index, data)
	if res.Err == nil || res.Err.Code != CodeBadVersion {
		return res, nil
	}
	v, newer := NewerVersion(data)
	if !newer {
		return res, nil
	}
	l.applied = prev
	return res, &NewerVersionError{Index: index, Version: v}
}

// checkVersion checks c.V against this ledger and against the fields c
// sets: a command may not carry a field newer than its own version (an
// older peer would take it for garbage instead of a newer command).
func checkVersion(c *Command, verb string) *Error {
	if c.V < CommandVersion || c.V > MaxCommandVersion() {
		return errf(CodeBadVersion, "command version %d: this ledger %s version %d", c.V, verb, MaxCommandVersion())
	}
	if need, field := RequiredVersion(c); need > c.V {
		return errf(CodeBadVersion, "command version %d carries %s, of version %d", c.V, field, need)
	}
	return nil
}

// versionTable knows, for every type reachable from a root struct type,
// the highest since tag inside it, so that the common command (no field
// above version 1 anywhere in its types) costs nothing to check.
type versionTable struct {
	max int
	// reach is the highest version reachable from a type (1 when no
	// tagged field is).
	reach map[reflect.Type]int
}

// newVersionTable reads the since tags of every struct reachable from
// root. It panics on a malformed tag or a tagged field that would be
// encoded while unset: programming errors that any test run catches.
func newVersionTable(root reflect.Type) *versionTable {
	t := &versionTable{reach: map[reflect.Type]int{}}
	t.max = t.scan(root)
	return t
}

func (t *versionTable) scan(typ reflect.Type) int {
	if v, ok := t.reach[typ]; ok {
		return v
	}
	t.reach[typ] = CommandVersion // a cycle reaches nothing new
	v := CommandVersion
	switch typ.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		v = t.scan(typ.Elem())
	case reflect.Struct:
		for i := 0; i < typ.NumField(); i++ {
			sf := typ.Field(i)
			if !sf.IsExported() {
				continue
			}
			v = max(v, sinceOf(typ, sf), t.scan(sf.Type))
		}
	}
	t.reach[typ] = v
	return v
}

// sinceOf is a field's since tag (1 when it has none).
func sinceOf(owner reflect.Type, sf reflect.StructField) int {
	tag, ok := sf.Tag.Lookup("since")
	if !ok {
		return CommandVersion
	}
	n, err := strconv.Atoi(tag)
	if err != nil || n <= CommandVersion {
		panic(fmt.Sprintf("ledger: %s.%s: since tag %q: want a version above %d", owner.Name(), sf.Name, tag, CommandVersion))
	}
	opts := sf.Tag.Get("json")
	omitted := strings.Contains(opts, ",omitzero") || strings.Contains(opts, ",omitempty") && sf.Type.Kind() != reflect.Struct
	if !omitted {
		panic(fmt.Sprintf("ledger: %s.%s has a since tag but is encoded when unset: add omitempty (or omitzero)", owner.Name(), sf.Name))
	}
	return n
}

// valueVersioned is a body whose values, not only its fields, carry a
// version: a value a later version added (a job policy's name, added to
// the list a vote may name) makes the command of that version, so that no
// peer of an older build takes it for malformed while newer ones apply
// it. valueVersion returns the version its values require and the JSON
// path (from the body) of the value that does (1 and "" when none). The
// version of the value's field must be at least its own since tag.
type valueVersioned interface {
	valueVersion() (int, string)
}

// required walks v, skipping every part whose type reaches no tagged field.
func (t *versionTable) required(v reflect.Value) (int, string) {
	if t.reach[v.Type()] <= CommandVersion {
		return CommandVersion, ""
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return CommandVersion, ""
		}
		n, path := t.required(v.Elem())
		if vv, ok := v.Interface().(valueVersioned); ok {
			if m, p := vv.valueVersion(); m > n {
				n, path = m, p
			}
		}
		return n, path
	case reflect.Slice, reflect.Array:
		best, path := CommandVersion, ""
		for i := 0; i < v.Len(); i++ {
			if n, p := t.required(v.Index(i)); n > best {
				best, path = n, fmt.Sprintf("[%d]%s", i, p)
			}
		}
		return best, path
	case reflect.Map:
		best, path := CommandVersion, ""
		it := v.MapRange()
		for it.Next() {
			if n, p := t.required(it.Value()); n > best {
				best, path = n, fmt.Sprintf("[%v]%s", it.Key(), p)
			}
		}
		return best, path
	case reflect.Struct:
		return t.requiredStruct(v)
	}
	return CommandVersion, ""
}

func (t *versionTable) requiredStruct(v reflect.Value) (int, string) {
	best, path := CommandVersion, ""
	typ := v.Type()
	for i := 0; i < typ.NumField(); i++ {
		sf := typ.Field(i)
		if !sf.IsExported() {
			continue
		}
		fv := v.Field(i)
		if fv.IsZero() {
			continue
		}
		seg := ""
		if name := jsonName(sf); name != "" {
			seg = "." + name
		}
		if n := sinceOf(typ, sf); n > best {
			best, path = n, seg
		}
		if n, p := t.required(fv); n > best {
			best, path = n, seg+p
		}
	}
	return best, path
}

// jsonName is a field's JSON name; an embedded struct's fields are
// inlined, so it has none of its own.
func jsonName(sf reflect.StructField) string {
	if sf.Anonymous {
		return ""
	}
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	if name == "" {
		return sf.Name
	}
	return name
}
