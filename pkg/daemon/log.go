package daemon

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Syslog priorities, as journald reads them from a "<N>" line prefix.
const (
	prioErr     = 3
	prioWarning = 4
	prioNotice  = 5
	prioInfo    = 6
)

// logger writes whole lines from any goroutine. Under journald it prefixes
// the priority (journald adds the time); elsewhere the time.
type logger struct {
	mu      sync.Mutex
	w       io.Writer
	journal bool
}

func (l *logger) printf(prio int, format string, args ...any) {
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.journal {
		fmt.Fprintf(l.w, "<%d>%s\n", prio, msg)
		return
	}
	fmt.Fprintf(l.w, "%s %s\n", time.Now().Format("2006-01-02T15:04:05.000Z07:00"), msg)
}

// Println lets promhttp report scrape errors through the same log.
func (l *logger) Println(v ...any) { l.printf(prioErr, "metrics: %s", fmt.Sprint(v...)) }

// lineWriter turns the plan runner's output into log lines with a prefix.
type lineWriter struct {
	log    *logger
	prefix string
	buf    bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // incomplete: keep for the next write
			return len(p), nil
		}
		w.log.printf(prioInfo, "%s%s", w.prefix, line)
	}
}

// Flush logs a last line without a newline.
func (w *lineWriter) Flush() {
	if w.buf.Len() > 0 {
		w.log.printf(prioInfo, "%s%s", w.prefix, w.buf.String())
		w.buf.Reset()
	}
}
