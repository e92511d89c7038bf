// Command clidocs writes hardway's CLI reference (docs/cli/ by default):
// one Markdown page per command, generated from the command tree itself.
// make docs runs it; internal/cli's TestCLIReferenceIsCurrent fails when
// the pages in docs/cli/ differ from what it would write.
package main

import (
	"fmt"
	"os"

	"github.com/hardway/hardway/internal/cli"
)

func main() {
	dir := "docs/cli"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := cli.WriteReference(dir); err != nil {
		fmt.Fprintln(os.Stderr, "clidocs:", err)
		os.Exit(1)
	}
}
