package yamlfile

import (
	"strings"
	"testing"
)

func TestErrorListWalk(t *testing.T) {
	l := ErrorList{File: "f.yaml"}
	list, byKey, ok := l.Mapping(root(t, "b: 1\na: 2\nb: 3\nc: 4\n"), "top", []string{"a", "b"})
	if !ok || len(list) != 2 || list[0].Key != "b" || list[1].Key != "a" || byKey["a"].V.Value != "2" {
		t.Fatalf("Mapping: ok %v, list %+v", ok, list)
	}
	if got := InOrder(root(t, "x: 1"), byKey); len(got) != 0 {
		t.Errorf("InOrder of another node: %+v", got)
	}
	if _, _, ok := l.Mapping(root(t, "- 1"), "m", nil); ok {
		t.Error("Mapping accepted a list")
	}
	if _, ok := l.Sequence(root(t, "a: 1"), "s"); ok {
		t.Error("Sequence accepted a mapping")
	}
	if l.Scalar(root(t, "~"), "n", "a number") {
		t.Error("Scalar accepted null")
	}
	want := strings.Join([]string{
		"f.yaml:1:1: m: must be a mapping (key: value lines), got a list",
		"f.yaml:1:1: s: must be a list, got a mapping",
		"f.yaml:1:1: n: must be a number, got nothing (null)",
		"f.yaml:3:1: top.b: duplicate key (first at line 1)",
		"f.yaml:4:1: top.c: unknown key (want one of: a, b)",
	}, "\n")
	if err := l.Err(); err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

func TestDocument(t *testing.T) {
	src := []byte("a:\n  - b: [x\n")
	_, err := Document{ParserLines: true}.Decode("f.yaml", src)
	_, raw := Document{}.Decode("f.yaml", src)
	if err == nil || raw == nil || err.Error() != "f.yaml:2: YAML syntax: did not find expected ',' or ']'" ||
		raw.Error() != "f.yaml:1: YAML syntax: did not find expected ',' or ']'" {
		t.Errorf("parser lines: %v; raw: %v", err, raw)
	}
	if _, err := (Document{Empty: "empty!"}).Decode("f.yaml", nil); err == nil || err.Error() != "f.yaml: empty!" {
		t.Errorf("empty: %v", err)
	}
	if _, err := (Document{}).Decode("f.yaml", []byte("a: 1\n---\nb: 2\n")); err == nil || !strings.Contains(err.Error(), "f.yaml:2:1: only one YAML document") {
		t.Errorf("two documents: %v", err)
	}
	n, err := Document{}.Decode("f.yaml", []byte("a: 1\n"))
	if err != nil || n.Content[0].Value != "a" {
		t.Errorf("root: %v %+v", err, n)
	}
}

func TestParseDecimal(t *testing.T) {
	for s, want := range map[string]string{"0.1": "1/10", "+12.5": "25/2", "1e3": "1000/1", ".5": "1/2"} {
		if r, ok := ParseDecimal(s); !ok || r.String() != want {
			t.Errorf("ParseDecimal(%q) = %v, %v; want %s", s, r, ok, want)
		}
	}
	for _, s := range []string{"NaN", ".inf", "0x1F", "1/3", "1e9999", ""} {
		if _, ok := ParseDecimal(s); ok {
			t.Errorf("ParseDecimal(%q) accepted", s)
		}
	}
}
