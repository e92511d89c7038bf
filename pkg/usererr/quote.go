package usererr

import "strings"

// Quote quotes s for a POSIX shell, so that a value printed into a command
// (a hint the user copies, or a command hardway runs on a host) is one word
// and never shell syntax: host names, paths, user names. A value of only
// safe characters is left as it is, so ordinary hints read unchanged.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
