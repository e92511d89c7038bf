package labtest

import (
	"testing"

	"github.com/hardway/hardway/pkg/lab"
)

func TestSlot(t *testing.T) {
	cfg := lab.Config{Prefix: "hwe", Net: "10.240.7"}
	t.Setenv("HARDWAY_LAB_SLOT", "")
	if got := Slot(t, cfg); got.Prefix != "hwe" || got.Net != "10.240.7" {
		t.Fatalf("slot 1 changed the config: %+v", got)
	}
	t.Setenv("HARDWAY_LAB_SLOT", "2")
	if got := Slot(t, cfg); got.Prefix != "hweb" || got.Net != "10.240.107" {
		t.Fatalf("slot 2: %+v", got)
	}
	if got := Slot(t, lab.Config{}); got.Prefix != lab.DefaultPrefix+"b" || got.Net != "10.240.100" {
		t.Fatalf("slot 2 of the defaults: %+v", got)
	}
}
