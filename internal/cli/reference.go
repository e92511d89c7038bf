package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// WriteReference writes the CLI reference, one Markdown page per command
// (hardway.md, hardway_up.md, ...), into dir, from the same command tree
// the binary runs: the pages cannot describe a flag that does not exist.
// No generation date is written, so an unchanged CLI gives unchanged pages.
func WriteReference(dir string) error {
	app := &App{Stdout: io.Discard, Stderr: io.Discard}
	root := app.newRootCmd()
	disableAutoGenTag(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return doc.GenMarkdownTree(root, dir)
}

func disableAutoGenTag(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		disableAutoGenTag(sub)
	}
}
