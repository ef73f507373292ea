package lineproc

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// collect reads all of p's output lines and the error that ended them.
func collect(t *testing.T, p *Proc) ([]string, error) {
	t.Helper()
	var out []string
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-p.Lines():
			if !ok {
				return out, nil
			}
			if l.Err != nil {
				return out, l.Err
			}
			out = append(out, string(l.Data))
		case <-deadline:
			t.Fatal("output did not end")
		}
	}
}

func TestProcLines(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	for _, tc := range []struct {
		name, script string
		maxLine      int
		want         []string
		wantErr      string
	}{
		{"lines", `printf 'a\n\nbc\n'`, 100, []string{"a\n", "\n", "bc\n"}, ""},
		{"no newline at the end", `printf 'a\nbc'`, 100, []string{"a\n"}, `output "bc" does not end with a newline`},
		{"line too long", `printf 'a\n0123456789\n'`, 5, []string{"a\n"}, "output line longer than 5 bytes"},
		{"echo of stdin", `read x; echo "got $x"`, 100, []string{"got hi\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start([]string{"sh", "-c", tc.script}, "", tc.maxLine)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(time.Second)
			// Only the script that reads stdin is written to: the others may have exited
			// already, and a write to them fails with a broken pipe.
			if strings.HasPrefix(tc.script, "read") {
				if _, err := p.Write([]byte("hi\n")); err != nil {
					t.Fatal(err)
				}
			}
			got, err := collect(t, p)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("lines %q, want %q", got, tc.want)
			}
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestProcKillTakesTheGroup: a wrapper's child holding stdout open does not
// keep the output (or Exited) from ending once the process is killed.
func TestProcKillTakesTheGroup(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	p, err := Start([]string{"sh", "-c", "echo dying >&2; sleep 300 & echo started; wait"}, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if l := <-p.Lines(); string(l.Data) != "started\n" {
		t.Fatalf("first line %q, %v", l.Data, l.Err)
	}
	p.Kill()
	if _, err := collect(t, p); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("not waited for after Kill")
	}
	if p.WaitErr() == nil {
		t.Error("a killed process has no exit error")
	}
	if got := strings.TrimSpace(p.Stderr()); got != "dying" {
		t.Errorf("stderr %q, want %q", got, "dying")
	}
}

func TestStartRefusesEmptyCommand(t *testing.T) {
	if _, err := Start(nil, "", 10); err == nil {
		t.Error("nil command started")
	}
	if _, err := Start([]string{""}, "", 10); err == nil {
		t.Error("empty program started")
	}
}

// TestKillAll: an abort kills every helper still running, each in its own
// process group (here a shell whose child holds the pipes).
func TestKillAll(t *testing.T) {
	p, err := Start([]string{"sh", "-c", "sleep 3600; echo never"}, "", 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	KillAll()
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the process outlived KillAll")
	}
	live.Lock()
	n := len(live.procs)
	live.Unlock()
	if n != 0 {
		t.Errorf("%d processes still registered after exiting", n)
	}
}
