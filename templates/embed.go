// Package templates holds the text/template files hardway renders: the
// systemd units and component configs pushed to control-plane hosts.
//
// The templates only lay a file out. Every decision — which flags, which
// paths, which API version — is made in Go (pkg/units), where table tests
// can see it.
package templates

import "embed"

// FS holds every *.tmpl; embedding keeps the binary self-contained and the
// output independent of the working directory.
//
//go:embed *.tmpl
var FS embed.FS
