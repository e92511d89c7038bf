package release

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A redirect from https to http is refused at once (no retries); one that
// stays on https, or goes from http to https, is followed.
func TestRedirectToWeakerSchemeRefused(t *testing.T) {
	plainHits := 0
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits++
		w.Write([]byte("from plain http"))
	}))
	defer plain.Close()
	var tlsSrv *httptest.Server
	tlsSrv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/down":
			http.Redirect(w, r, plain.URL+"/file", http.StatusFound)
		case "/same":
			http.Redirect(w, r, tlsSrv.URL+"/file", http.StatusMovedPermanently)
		case "/file":
			w.Write([]byte("from https"))
		}
	}))
	defer tlsSrv.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, tlsSrv.URL+"/file", http.StatusFound)
	}))
	defer up.Close()

	f := &Fetcher{Client: tlsSrv.Client(), Attempts: 3, Backoff: time.Millisecond}
	_, err := f.GetSmall(t.Context(), tlsSrv.URL+"/down", 1<<20)
	if err == nil || !strings.Contains(err.Error(), "refused: it leaves https") || strings.Contains(err.Error(), "attempts") {
		t.Fatalf("https -> http: %v", err)
	}
	if plainHits != 0 {
		t.Errorf("the plain http server was asked %d times", plainHits)
	}
	for _, u := range []string{tlsSrv.URL + "/same", up.URL} {
		b, err := f.GetSmall(t.Context(), u, 1<<20)
		if err != nil || !bytes.Equal(b, []byte("from https")) {
			t.Errorf("%s: %q %v", u, b, err)
		}
	}
	if tlsSrv.Client().CheckRedirect != nil {
		t.Error("the caller's client was changed")
	}
	// The default client has the policy too.
	if (&Fetcher{}).client().CheckRedirect == nil {
		t.Error("the default client follows any redirect")
	}
}
