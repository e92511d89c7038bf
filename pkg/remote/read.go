package remote

import (
	"context"
	"encoding/base64"
	"fmt"
	"path"
	"strings"
)

// Content is a file read from a host.
type Content struct {
	Path   string
	Exists bool   // false: no regular file there
	Data   []byte // the content when Exists
}

// ReadFiles reads small files (certificates, keys, configs) from h with one
// command. Each file travels as one base64 line, so a file that changes
// while it is read can never shift the others. A missing file is not an
// error (Exists false); anything else at the path that is not a regular
// file is. Contents may be secrets: callers must never print Data.
func ReadFiles(ctx context.Context, h Host, paths []string) ([]Content, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# read %d files\n", len(paths))
	for _, p := range paths {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("%s: %s: not an absolute path", h.Name(), p)
		}
		fmt.Fprintf(&s, "f=%s; if [ -f \"$f\" ]; then printf 'F '; base64 -w0 < \"$f\" || exit 1; echo; "+
			"elif [ -e \"$f\" ]; then echo N; else echo M; fi\n", Quote(p))
	}
	out, err := h.Run(ctx, s.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("read files: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(paths) {
		return nil, fmt.Errorf("%s: read files: got %d lines for %d files", h.Name(), len(lines), len(paths))
	}
	res := make([]Content, len(paths))
	for i, l := range lines {
		res[i].Path = paths[i]
		switch {
		case l == "M":
		case l == "N":
			return nil, fmt.Errorf("%s: %s exists and is not a regular file", h.Name(), paths[i])
		case strings.HasPrefix(l, "F "):
			b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(l, "F "))
			if err != nil {
				// Never quote the line: it may be a key.
				return nil, fmt.Errorf("%s: read %s: undecodable output", h.Name(), paths[i])
			}
			res[i].Exists, res[i].Data = true, b
		case l == "F":
			res[i].Exists = true // empty file
		default:
			return nil, fmt.Errorf("%s: read %s: unexpected output", h.Name(), paths[i])
		}
	}
	return res, nil
}
