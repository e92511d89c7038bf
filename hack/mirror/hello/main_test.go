package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHello(t *testing.T) {
	srv := httptest.NewServer(handler("pod-a"))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code, body := get(t, srv.URL+"/"); code != 200 || !strings.HasPrefix(body, "hello from pod-a ("+addr+"), you are 127.0.0.1:") {
		t.Errorf("/: %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/resolve?name=localhost"); code != 200 || !strings.Contains(body, "127.0.0.1") {
		t.Errorf("/resolve localhost: %d %q", code, body)
	}
	if code, _ := get(t, srv.URL+"/resolve?name=bad..name"); code != http.StatusBadGateway { // fails locally: not a DNS name
		t.Errorf("/resolve of a missing name: %d, want 502", code)
	}
	if code, _ := get(t, srv.URL+"/resolve"); code != http.StatusBadRequest {
		t.Errorf("/resolve without a name: %d, want 400", code)
	}
	if code, _ := get(t, srv.URL+"/other"); code != http.StatusNotFound {
		t.Errorf("/other: %d, want 404", code)
	}
}
