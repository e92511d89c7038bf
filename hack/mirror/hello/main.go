// Command hello is the test server image of the release mirror
// (hardway.local/hello:v1): a static HTTP server that tells a test which pod
// answered, and resolves names with the pod's own resolver so DNS tests need
// nothing else in the image.
//
//	GET /                  "hello from <hostname> (<pod ip>:<port>), you are <client>"
//	GET /resolve?name=N    the addresses of N, one per line; 502 when the lookup fails
//	GET /healthz           "ok"
//
// LISTEN sets the address (default :8080).
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	addr := ":8080"
	if a := os.Getenv("LISTEN"); a != "" {
		addr = a
	}
	host, _ := os.Hostname()
	srv := &http.Server{Addr: addr, Handler: handler(host), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("hello: listening on %s", addr)
	log.Fatal(srv.ListenAndServe())
}

func handler(host string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		// The address the request came in on is the pod IP the client reached.
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		la := ""
		if local != nil {
			la = local.String()
		}
		fmt.Fprintf(w, "hello from %s (%s), you are %s\n", host, la, r.RemoteAddr)
	})
	mux.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			http.Error(w, "usage: /resolve?name=NAME", http.StatusBadRequest)
			return
		}
		addrs, err := net.DefaultResolver.LookupHost(r.Context(), name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, strings.Join(addrs, "\n"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}
