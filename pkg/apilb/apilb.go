// Package apilb reads what the workers' node-local apiserver load balancer
// (Traefik) says about its backends: its read-only API lists each TCP
// service with its servers and, once the health check ran, each server's
// status. verify and the tests read it the same way.
package apilb

import (
	"encoding/json"
	"fmt"
	"slices"
)

// ServicesPath is the API endpoint that lists the TCP services.
const ServicesPath = "/api/tcp/services"

// Backend statuses as Traefik reports them.
const (
	Up      = "UP"
	Down    = "DOWN"
	Unknown = "" // not health-checked yet (Traefik has just started)
)

// Backend is one apiserver as the load balancer sees it.
type Backend struct {
	Address string `json:"address"`
	Status  string `json:"status"`
}

// service is the part of an /api/tcp/services entry read here.
type service struct {
	Name         string   `json:"name"`
	Provider     string   `json:"provider"`
	Status       string   `json:"status"`
	Error        []string `json:"error"`
	LoadBalancer *struct {
		Servers []struct {
			Address string `json:"address"`
		} `json:"servers"`
	} `json:"loadBalancer"`
	ServerStatus map[string]string `json:"serverStatus"`
}

// Backends returns the servers of the TCP service name (as written in the
// file provider's config: "kube-apiserver", which the API calls
// "kube-apiserver@file"), in the config's order, with their status. An
// error says the service is missing or disabled (Traefik could not use the
// config).
func Backends(body []byte, name string) ([]Backend, error) {
	var svcs []service
	if err := json.Unmarshal(body, &svcs); err != nil {
		return nil, fmt.Errorf("%s: not the API's answer: %w", ServicesPath, err)
	}
	var names []string
	for _, s := range svcs {
		names = append(names, s.Name)
		if s.Name != name+"@file" {
			continue
		}
		if s.Status != "" && s.Status != "enabled" {
			return nil, fmt.Errorf("service %s is %s: %v", s.Name, s.Status, s.Error)
		}
		if s.LoadBalancer == nil {
			return nil, fmt.Errorf("service %s has no load balancer", s.Name)
		}
		out := make([]Backend, 0, len(s.LoadBalancer.Servers))
		for _, srv := range s.LoadBalancer.Servers {
			out = append(out, Backend{Address: srv.Address, Status: s.ServerStatus[srv.Address]})
		}
		return out, nil
	}
	return nil, fmt.Errorf("no TCP service %s@file (the API lists %v): the load balancer did not load its config", name, names)
}

// Diff compares the backends with the addresses they should be: those
// missing from the load balancer and those it has that are not wanted
// (a control-plane host removed from the inventory).
func Diff(got []Backend, want []string) (missing, extra []string) {
	var have []string
	for _, b := range got {
		have = append(have, b.Address)
		if !slices.Contains(want, b.Address) {
			extra = append(extra, b.Address)
		}
	}
	for _, w := range want {
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	return missing, extra
}
