package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/smoke"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

func (a *App) newSmokeCmd() *cobra.Command {
	var output, image string
	var port int
	var timeout time.Duration
	var keep bool
	cmd := &cobra.Command{
		Use:   "smoke",
		Short: "Run the tutorial's smoke test on the live cluster, and clean up after it",
		Long: `smoke is the smoke test of Kubernetes the Hard Way, automated. In a namespace
of its own, hardway-smoke (deleted at the end, also after a failure or ^C;
one left by a killed run is removed first), it proves, one pass/fail line
each with a hint:

  smoke/secret        a Secret is stored encrypted in etcd (read raw through
                      SSH from etcd: k8s:enc:<provider>:v1:, the value absent)
  smoke/deployment    a Deployment of --image runs and is ready
  smoke/port-forward  GET / through a port-forward to the pod (client-go)
  smoke/logs          the pod's log can be read
  smoke/exec          exec works (/pause -v in the pause container beside it)
  smoke/nodeport      a NodePort Service answers on every worker, asked from
                      the first control-plane host
  smoke/dns           the pod resolves kubernetes.default and the smoke
                      Service's name; a failure names the cause: the DNS
                      Service, its endpoints or the pod network

The image (--image, default hardway.local/hello:v1, the lab's test server)
must serve HTTP on --port; for the DNS step it either answers
GET /resolve?name=N with N's addresses one per line (hello does), or has a
shell with getent or nslookup (nginx: --image nginx:1.27 --port 80).
It must be on the workers (images: in the inventory) or pullable.

Exit code 1 when a step fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			st := a.stateDir(inv)
			lg, err := runlog.Open(st.LogDir(), "smoke", time.Now())
			if err != nil {
				return err
			}
			c := cluster.New(inv, cluster.Options{State: st, Trace: lg.Command})
			defer c.Close()
			opt := smoke.Options{Image: image, Port: port, Timeout: timeout, Keep: keep,
				Progress: func(r verify.Result) {
					line := fmt.Sprintf("%-4s  %-18s %s", strings.ToUpper(string(r.Status)), r.Check, r.Message)
					if r.Host != "" {
						line = fmt.Sprintf("%-4s  %-18s %s: %s", strings.ToUpper(string(r.Status)), r.Check, r.Host, r.Message)
					}
					fmt.Fprintln(lg, line)
					if output != "json" {
						fmt.Fprintln(a.Stdout, line)
					}
					if r.Status != verify.Pass && r.Hint != "" {
						fmt.Fprintf(lg, "      hint: %s\n", r.Hint)
						if output != "json" {
							fmt.Fprintf(a.Stdout, "      hint: %s\n", r.Hint)
						}
					}
				}}
			rep, err := c.Smoke(cmd.Context(), opt)
			if err != nil {
				lg.End(err)
				return runlog.WithPath(err, lg)
			}
			if output == "json" {
				err = rep.WriteJSON(a.Stdout)
			} else {
				_, err = fmt.Fprintf(a.Stdout, "\n%d passed, %d failed in %s\n", rep.Pass, rep.Fail, rep.Duration.Round(time.Millisecond))
			}
			if err == nil && !rep.OK() {
				err = usererr.New(errors.New("smoke: "+fmt.Sprint(rep.Fail)+" step(s) failed"), "each failed line above has its own hint")
			}
			if err == nil && cmd.Context().Err() != nil {
				err = fmt.Errorf("smoke: interrupted: %w", cmd.Context().Err())
			}
			lg.End(err)
			return runlog.WithPath(err, lg)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (a line per step) or json")
	cmd.Flags().StringVar(&image, "image", smoke.HelloImage, "the image the Deployment runs (an HTTP server on --port)")
	cmd.Flags().IntVar(&port, "port", smoke.HelloPort, "the port the image serves HTTP on")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "time limit for each wait (the pod ready, a NodePort, DNS)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the namespace hardway-smoke afterwards, to look at it")
	return cmd
}
