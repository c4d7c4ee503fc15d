package yamlfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func testParser() Parser {
	return Parser{MakeErr: func(n *yaml.Node, field, msg string) error {
		line := 0
		if n != nil {
			line = n.Line
		}
		return fmt.Errorf("%d: %s: %s", line, field, msg)
	}}
}

func root(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

func TestMapping(t *testing.T) {
	p := testParser()
	tests := []struct {
		src, want string
	}{
		{"a: 1\nb: 2\n", ""},
		{"a: 1\na: 2\n", "2: x.a: duplicate key"},
		{"a: &v 1\nb: *v\n", "2: x.b: aliases are not supported"},
		{"- 1\n", "1: x: want a mapping, got a list"},
		{"? [1]\n: 2\n", "want a plain key"},
	}
	for _, tc := range tests {
		var keys []string
		err := p.Mapping(root(t, tc.src), "x", func(key string, _, _ *yaml.Node, _ string) error {
			keys = append(keys, key)
			return nil
		})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.src, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: err %v, want %q", tc.src, err, tc.want)
		}
		if tc.want == "" && strings.Join(keys, ",") != "a,b" {
			t.Errorf("%q: keys %v, want file order a,b", tc.src, keys)
		}
	}
}

func TestScalars(t *testing.T) {
	p := testParser()
	if x, err := p.Number(root(t, "2.5"), "n"); err != nil || x != 2.5 {
		t.Errorf("Number(2.5) = %v, %v", x, err)
	}
	for src, want := range map[string]string{
		"-1": "must not be negative", ".nan": "finite", "abc": "want a number", "~": "want a value",
	} {
		if _, err := p.Number(root(t, src), "n"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Number(%s): %v, want %q", src, err, want)
		}
	}
	if c, err := p.Count(root(t, "7"), "c"); err != nil || c != 7 {
		t.Errorf("Count(7) = %v, %v", c, err)
	}
	if _, err := p.Count(root(t, "1.5"), "c"); err == nil {
		t.Error("Count(1.5) accepted")
	}
	if d, err := p.Duration(root(t, "90s"), "d"); err != nil || d.Seconds() != 90 {
		t.Errorf("Duration(90s) = %v, %v", d, err)
	}
	if _, err := p.Duration(root(t, "-1s"), "d"); err == nil {
		t.Error("Duration(-1s) accepted")
	}
	if b, err := p.Boolean(root(t, "true"), "b"); err != nil || !b {
		t.Errorf("Boolean(true) = %v, %v", b, err)
	}
	if _, err := p.Str(root(t, "12"), "s"); err == nil {
		t.Error("Str(12) accepted a number")
	}
}

func TestSyntaxErrorLine(t *testing.T) {
	line, msg := SyntaxErrorLine(errors.New("yaml: line 3: mapping values are not allowed"))
	if line != 3 || msg != "mapping values are not allowed" {
		t.Errorf("got %d %q", line, msg)
	}
	if line, msg := SyntaxErrorLine(errors.New("yaml: did not find expected key")); line != 0 || msg != "did not find expected key" {
		t.Errorf("got %d %q", line, msg)
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine("a\nb\tc\x01"); got != `a\nb\tc?` {
		t.Errorf("OneLine = %q", got)
	}
	long := strings.Repeat("x", MaxMessageRunes+10)
	if got := OneLine(long); len([]rune(got)) != MaxMessageRunes+3 || !strings.HasSuffix(got, "...") {
		t.Errorf("OneLine(long) has %d runes", len([]rune(got)))
	}
	if Join("", "a") != "a" || Join("a", "b") != "a.b" || Index("a", 2) != "a[2]" {
		t.Error("Join/Index")
	}
}

// TestBytes: whole numbers of bytes, and sizes with IEC or SI units.
func TestBytes(t *testing.T) {
	p := testParser()
	for _, c := range []struct {
		src  string
		want int64
		err  string
	}{
		{"1024", 1024, ""},
		{"16GiB", 16 << 30, ""},
		{"512 MiB", 512 << 20, ""},
		{"2GB", 2_000_000_000, ""},
		{"-5", 0, "must not be negative"},
		{"lots", 0, "want a size such as 16GiB"},
		{"2EiB", 0, "over the limit of 1 EiB"},
		{"1.5", 0, "want a size"},
	} {
		got, err := p.Bytes(root(t, c.src), "memory")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error containing %q", c.src, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q = %d, %v; want %d", c.src, got, err, c.want)
		}
	}
}
