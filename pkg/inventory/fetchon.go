package inventory

import "net/url"

// Values of releases.fetchOn.
const (
	// FetchOnOperator: hardway downloads and verifies every release file on
	// the operator's machine and pushes it to each host over SSH. It works
	// for hosts without internet; the operator's link carries the release
	// set once per host.
	FetchOnOperator = "operator"
	// FetchOnHosts: each host downloads the release files it installs from
	// the release URLs itself and checks each against the sha256 pinned in
	// hardway.lock (on the host, before anything is installed); the
	// operator's link carries commands only. Files whose URL is file://
	// (on the operator's disk) are still pushed.
	FetchOnHosts = "hosts"
)

// validateFetchOn fills in and checks releases.fetchOn.
func (l *loader) validateFetchOn(inv *Inventory) {
	r := &inv.Releases
	switch r.FetchOn {
	case "":
		r.FetchOn = FetchOnOperator
	case FetchOnOperator, FetchOnHosts:
	default:
		l.errorf("releases.fetchOn", "operator (default: push from this machine over SSH) or hosts (each host downloads from the release URLs, checked against hardway.lock)",
			"%q is not a fetch mode", r.FetchOn)
		return
	}
	if r.FetchOn != FetchOnHosts {
		return
	}
	// Every release URL on this machine's disk: nothing for the hosts to
	// fetch, which is almost certainly not what was meant.
	local := true
	for _, u := range []string{r.Kubernetes, r.Etcd} {
		if p, err := url.Parse(u); err != nil || p.Scheme != "file" {
			local = false
		}
	}
	if local {
		l.warnf("releases.fetchOn", "serve the mirror over https (or http with releases.allowHTTP) so that the hosts can reach it",
			"hosts: releases.kubernetes and releases.etcd are file:// URLs on this machine, so their files are pushed over SSH all the same")
	}
}
