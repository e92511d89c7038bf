package inventory

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration that also reads the units certificate
// lifetimes are thought of in: "365d", "10y" (a year is 365 days), besides
// Go's "8760h".
type Duration time.Duration

// ErrTooLong says a duration does not fit in a time.Duration (about 292
// years). Multiplying would wrap around silently: "585y" became 21 days.
var ErrTooLong = errors.New("too long")

// ParseDuration parses Go durations plus the d and y suffixes. A value
// that does not fit in a time.Duration is ErrTooLong, never wrapped around.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "y": 365 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if errors.Is(err, strconv.ErrRange) {
				return 0, fmt.Errorf("%q is %w", s, ErrTooLong)
			}
			if err != nil {
				return 0, fmt.Errorf("%q is not a duration (use e.g. 8760h, 365d or 10y)", s)
			}
			if v > math.MaxInt64/int64(unit) || v < math.MinInt64/int64(unit) {
				return 0, fmt.Errorf("%q is %w", s, ErrTooLong)
			}
			return time.Duration(v) * unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// time.ParseDuration says only "invalid duration" for an overflow.
		if _, ferr := strconv.ParseFloat(strings.TrimRight(s, "hmsuµn"), 64); ferr == nil && strings.ContainsAny(s, "hmsuµn") {
			return 0, fmt.Errorf("%q is %w", s, ErrTooLong)
		}
		return 0, fmt.Errorf("%q is not a duration (use e.g. 8760h, 365d or 10y)", s)
	}
	return d, nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a duration must be a string such as 8760h, 365d or 10y", n.Line)}}
	}
	v, err := ParseDuration(n.Value)
	if errors.Is(err, ErrTooLong) {
		// Longer than any maximum: validation reports it against the
		// field's own maximum, which it knows and this type does not.
		*d = Duration(math.MaxInt64)
		return nil
	}
	if err != nil {
		// A TypeError (not a plain error) lets yaml.v3 go on decoding the
		// rest of the file, so every problem is reported at once.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
