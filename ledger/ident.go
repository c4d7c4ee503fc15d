package ledger

// ValidIdent says whether s is 1-max characters of [A-Za-z0-9._-]
// starting with a letter or digit: the shape of organisation and machine
// names (max MaxNameLen) and of task IDs (MaxTaskIDLen), so never "." or
// ".." and never a path. The peers' own checks of names and IDs (config,
// transfer) are this rule.
func ValidIdent(s string, max int) bool {
	return s != "" && len(s) <= max && isAlnum(s[0]) && isAlnumOr(s, "._-")
}
