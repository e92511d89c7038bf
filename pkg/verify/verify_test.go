package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRunCountsAndOrders(t *testing.T) {
	checks := []Check{
		{Name: "a", Run: func(context.Context) []Result { return []Result{OKf("h1", "fine"), OKf("h2", "fine")} }},
		{Name: "b", Run: func(context.Context) []Result { return []Result{Failf("h1", "do X", "broken")} }},
		{Name: "c", Run: func(context.Context) []Result { return []Result{Warnf("", "soon", "expires in 20 days")} }},
		{Name: "d", Run: func(ctx context.Context) []Result {
			<-ctx.Done() // a hung check is cut off by its timeout
			return []Result{Failf("", "", "timed out: %v", ctx.Err())}
		}},
		{Name: "e", Run: func(context.Context) []Result { return nil }},
	}
	r := Run(context.Background(), checks, 2, 50*time.Millisecond)
	if r.Pass != 2 || r.Warn != 1 || r.Fail != 3 || r.OK() {
		t.Fatalf("counts %d/%d/%d", r.Pass, r.Warn, r.Fail)
	}
	if r.Results[0].Check != "a" || r.Results[2].Check != "b" || r.Results[5].Check != "e" {
		t.Fatalf("order %+v", r.Results)
	}
	if s := r.Sorted(); s[0].Status != Fail || s[len(s)-1].Status != Pass {
		t.Fatalf("sorted %+v", s)
	}
	var tb bytes.Buffer
	r.WriteTable(&tb)
	for _, want := range []string{"FAIL    b", "hint: do X", "2 passed, 1 warnings, 3 failed"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	var jb bytes.Buffer
	r.WriteJSON(&jb)
	var back Report
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil || back.Fail != 3 || back.Results[2].Hint != "do X" {
		t.Fatalf("json round trip: %v %+v", err, back)
	}
}
