// Package lineproc runs a long-lived helper process that speaks JSON lines
// on its stdin and stdout: stx's external reward commands and workflow
// environments. It owns what both need of the process itself: its own
// process group (a terminal's Ctrl-C reaches stx alone; a kill takes the
// children of a wrapper such as `sh -c` too), stdout as a channel of bounded
// lines, the end of its stderr for error messages, and a bounded shutdown.
// The protocols on top are the callers'.
package lineproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"stx.dev/stx/internal/tailbuf"
)

// stderrKept is how much of a process's stderr is kept for its errors.
const stderrKept = 4096

// Line is one line of output (with its newline), or the error that ended
// the output (set on the last value before Lines closes; a clean end of
// output closes Lines without one).
type Line struct {
	Data []byte
	Err  error
}

// live is the registry of started processes that have not exited: their
// own process groups keep them from a terminal's Ctrl-C, so an abort must
// kill them itself (KillAll).
var live = struct {
	sync.Mutex
	procs map[*Proc]struct{}
}{procs: map[*Proc]struct{}{}}

// KillAll kills every started process that has not exited (and its process
// group), for an abort that exits without closing them: helper processes
// must not outlive stx.
func KillAll() {
	live.Lock()
	defer live.Unlock()
	for p := range live.procs {
		killTree(p.cmd)
	}
}

// Proc is a started process.
type Proc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan Line
	exited  chan struct{}
	waitErr error
	stderr  *tailbuf.Buffer
}

// Start starts argv with its stdin and stdout piped. argv0, when not empty,
// replaces the program's argv[0] (stx runs itself as "stx" so that the binary
// recognises its own subcommand). A line of output longer than maxLine
// bytes ends the output with an error, so that a runaway process cannot
// make stx buffer without limit.
func Start(argv []string, argv0 string, maxLine int) (*Proc, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("empty command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if argv0 != "" {
		cmd.Args[0] = argv0
	}
	// Wait must not hang on output pipes a grandchild keeps open.
	cmd.WaitDelay = time.Second
	detach(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// stdout is a pipe of our own (not StdoutPipe), so that waiting for the
	// process in the background never closes it before its last line is read.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	p := &Proc{cmd: cmd, stdin: stdin, lines: make(chan Line, 1), exited: make(chan struct{}), stderr: tailbuf.New(stderrKept)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("%q: %w", strings.Join(argv, " "), err)
	}
	pw.Close()
	live.Lock()
	live.procs[p] = struct{}{}
	live.Unlock()
	go func() {
		p.waitErr = cmd.Wait()
		live.Lock()
		delete(live.procs, p)
		live.Unlock()
		close(p.exited)
	}()
	go readLines(pr, p.lines, maxLine)
	return p, nil
}

// readLines sends each line of r to out, then closes out.
func readLines(r io.ReadCloser, out chan<- Line, maxLine int) {
	defer close(out)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		var buf []byte
		for {
			chunk, err := br.ReadSlice('\n')
			buf = append(buf, chunk...)
			if len(buf) > maxLine {
				out <- Line{Err: fmt.Errorf("output line longer than %d bytes", maxLine)}
				return
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if len(bytes.TrimSpace(buf)) > 0 {
					out <- Line{Err: fmt.Errorf("output %q does not end with a newline", Clip(buf, 200))}
				}
				return
			}
			break
		}
		out <- Line{Data: buf}
	}
}

// Write writes to the process's stdin.
func (p *Proc) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Lines is the process's output, line by line; it closes at the end of output.
func (p *Proc) Lines() <-chan Line { return p.lines }

// Exited is closed once the process has exited and been waited for.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// WaitErr is the process's exit status; valid once Exited is closed.
func (p *Proc) WaitErr() error { return p.waitErr }

// Stderr returns the end of what the process wrote to its stderr.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Kill kills the process's group and closes its stdin; it does not wait.
func (p *Proc) Kill() {
	killTree(p.cmd)
	p.stdin.Close()
}

// Close closes the process's stdin and gives it grace to exit, then kills
// it and waits up to grace again. Output nobody reads any more is drained.
func (p *Proc) Close(grace time.Duration) {
	p.stdin.Close()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	p.Kill()
	select {
	case <-p.exited:
	case <-time.After(grace):
	}
}

// Clip shortens output for an error message.
func Clip(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\r\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
