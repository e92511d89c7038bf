// Command hardway builds a Kubernetes control plane the hard way, reproducibly.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hardway/hardway/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
