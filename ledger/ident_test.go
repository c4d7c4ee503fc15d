package ledger

import (
	"strings"
	"testing"
)

func TestValidIdent(t *testing.T) {
	for _, c := range []struct {
		s    string
		max  int
		want bool
	}{
		{"uni-a", MaxNameLen, true},
		{"uni-a-12", MaxTaskIDLen, true},
		{"A.b_c-9", 7, true},
		{"0rg", 3, true},
		{strings.Repeat("a", MaxNameLen), MaxNameLen, true},
		{strings.Repeat("a", MaxNameLen+1), MaxNameLen, false},
		{"", MaxNameLen, false},
		{".", MaxNameLen, false},
		{"..", MaxNameLen, false},
		{"-a", MaxNameLen, false},
		{"_a", MaxNameLen, false},
		{"a/b", MaxNameLen, false},
		{"../x", MaxNameLen, false},
		{"a b", MaxNameLen, false},
		{"é", MaxNameLen, false},
		{"a\x00", MaxNameLen, false},
	} {
		if got := ValidIdent(c.s, c.max); got != c.want {
			t.Errorf("ValidIdent(%q, %d) = %v, want %v", c.s, c.max, got, c.want)
		}
	}
}
