package release

import (
	"fmt"
	"io"
	"sync"

	"github.com/schollz/progressbar/v3"
)

// Progress hears about downloads. Implementations must be safe for
// concurrent use: downloads run in parallel.
type Progress interface {
	Update(name string, have, total int64) // total -1 when unknown
	Done(name, what string)                // one line: "kube-apiserver v1.36.3: downloaded (120 MB)"
}

type nopProgress struct{}

func (nopProgress) Update(string, int64, int64) {}
func (nopProgress) Done(string, string)         {}

// NewProgress reports to w: one bar for all downloads on a terminal, plain
// lines otherwise (a log or CI output should not fill with redraws).
func NewProgress(w io.Writer, terminal bool) Progress {
	if !terminal {
		return &lineProgress{w: w}
	}
	return &barProgress{w: w, files: map[string][2]int64{}}
}

type lineProgress struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *lineProgress) Update(string, int64, int64) {}

func (p *lineProgress) Done(name, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[fetch] %s %s\n", name, what)
}

type barProgress struct {
	mu    sync.Mutex
	w     io.Writer
	bar   *progressbar.ProgressBar
	files map[string][2]int64 // have, total
}

func (p *barProgress) Update(name string, have, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files[name] = [2]int64{have, total}
	var sumHave, sumTotal int64
	for _, f := range p.files {
		sumHave += f[0]
		if f[1] > 0 {
			sumTotal += f[1]
		}
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(sumTotal,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription("[fetch] downloading"),
			progressbar.OptionThrottle(100_000_000), // 100ms
			progressbar.OptionClearOnFinish(),
			progressbar.OptionFullWidth(),
		)
	}
	if p.bar.GetMax64() != sumTotal {
		p.bar.ChangeMax64(sumTotal)
	}
	_ = p.bar.Set64(sumHave)
}

func (p *barProgress) Done(name, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintf(p.w, "[fetch] %s %s\n", name, what)
	if p.bar != nil {
		_ = p.bar.RenderBlank()
	}
}

// Finish removes the bar; call it once all downloads are done.
func Finish(p Progress) {
	if b, ok := p.(*barProgress); ok {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.bar != nil {
			_ = b.bar.Finish()
			_ = b.bar.Clear()
			b.bar = nil
			clear(b.files)
		}
	}
}
