package rundir

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 3, 45, 13, 0, time.UTC)

func mustCreate(t *testing.T, root string) *Dir {
	t.Helper()
	d, err := Create(root, "grpo", t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestCreateNamesAndLayout(t *testing.T) {
	root := filepath.Join(t.TempDir(), "runs")
	var dirs []*Dir
	for range 3 {
		d := mustCreate(t, root)
		dirs = append(dirs, d)
	}
	want := []string{"grpo-20261130-034513", "grpo-20261130-034513-2", "grpo-20261130-034513-3"}
	for i, d := range dirs {
		if got := filepath.Base(d.Path()); got != want[i] {
			t.Errorf("run %d: name %q, want %q", i, got, want[i])
		}
		for _, name := range []string{MarkerFile, LockFile, MetricsFile, EventsFile, EpisodesFile, RecipesDir, CheckpointsDir} {
			if _, err := os.Stat(filepath.Join(d.Path(), name)); err != nil {
				t.Errorf("run %d: %v", i, err)
			}
		}
		if d.Recipe() != "grpo" || !d.Created().Equal(t0) {
			t.Errorf("run %d: recipe %q created %v", i, d.Recipe(), d.Created())
		}
	}
}

func TestCreateRejectsBadRecipeNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", ".hidden", "a/b", `a\b`, "a:b", "a\nb"} {
		if d, err := Create(t.TempDir(), name, t0); err == nil {
			d.Close()
			t.Errorf("Create(%q) succeeded", name)
		}
	}
}

func TestOpenValidates(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	write := func(name, marker string) string {
		dir := filepath.Join(root, name)
		os.Mkdir(dir, 0o755)
		if marker != "" {
			os.WriteFile(filepath.Join(dir, MarkerFile), []byte(marker), 0o644)
		}
		return dir
	}
	tests := []struct {
		name, path string
		notRun     bool
		msg        string
	}{
		{"missing", filepath.Join(root, "nope"), false, "no such file"},
		{"a file", file, true, "it is a file"},
		{"no marker", write("plain", ""), true, "it has no run.json"},
		{"bad json", write("badjson", "{"), true, "not valid JSON"},
		{"other format", write("other", `{"format":"something","version":1,"recipe":"x"}`), true, `format "something"`},
		{"future version", write("future", `{"format":"stx-run","version":9,"recipe":"x"}`), false, "layout version 9"},
		{"bad recipe", write("badrecipe", `{"format":"stx-run","version":1,"recipe":"../x"}`), false, "cannot name a run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Open(tt.path)
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded")
			}
			if errors.Is(err, ErrNotRun) != tt.notRun || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q: want ErrNotRun=%v and %q", err, tt.notRun, tt.msg)
			}
		})
	}
}

func TestOpenRecreatesMissingDirs(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	path := d.Path()
	d.Close()
	os.RemoveAll(filepath.Join(path, CheckpointsDir))
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if notes := d.Notes(); len(notes) != 1 || !strings.Contains(notes[0], "checkpoints/") {
		t.Errorf("notes %q", notes)
	}
	if _, err := d.Checkpoints(); err != nil {
		t.Error(err)
	}
}

func TestLockInProcess(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	// Both a second Open and a bare lock fail while d is open.
	if d2, err := Open(d.Path()); err == nil {
		d2.Close()
		t.Fatal("second Open succeeded")
	} else if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("this process (%d)", os.Getpid())) {
		t.Errorf("second Open: %v", err)
	}
	if _, err := AcquireLock(d.Path()); !errors.Is(err, ErrInUse) {
		t.Errorf("AcquireLock: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Path(), LockFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Close: %v", err)
	}
	d2, err := Open(d.Path())
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	d2.Close()
}

// TestHelperHoldRun is not a test: run by TestLockAcrossProcesses in a
// child process, it opens the run directory named by STX_RUNDIR_HOLD, says
// so and waits to be killed.
func TestHelperHoldRun(t *testing.T) {
	path := os.Getenv("STX_RUNDIR_HOLD")
	if path == "" {
		t.Skip("helper process")
	}
	d, err := Open(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	d.LogMetrics(0, map[string]float64{"loss": 1})
	fmt.Println("holding")
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestLockAcrossProcesses(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	path := d.Path()
	d.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldRun$")
	cmd.Env = append(os.Environ(), "STX_RUNDIR_HOLD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "holding" {
		t.Fatalf("helper said %q", line)
	}
	_, err = Open(path)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", cmd.Process.Pid)) {
		t.Fatalf("Open while another process holds the run: %v", err)
	}
	// A crash: the holder dies without releasing; its lock file stays.
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(path, LockFile)); err != nil {
		t.Fatalf("the dead holder's lock file: %v", err)
	}
	d, err = Open(path)
	if err != nil {
		t.Fatalf("Open after the holder died: %v", err)
	}
	defer d.Close()
	if notes := d.Notes(); len(notes) == 0 || !strings.Contains(notes[0], strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("notes %q: want the stale lock's pid", notes)
	}
}

func TestStaleLockFileTakenOver(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	path := d.Path()
	d.Close()
	// A pid that ran and ended: its lock file is stale.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	owner, _ := json.Marshal(lockOwner{PID: dead, Since: t0})
	os.WriteFile(filepath.Join(path, LockFile), owner, 0o644)
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	data, _ := os.ReadFile(filepath.Join(path, LockFile))
	if o, ok := readOwner(data); !ok || o.PID != os.Getpid() {
		t.Errorf("lock file after takeover: %s", data)
	}
	if notes := d.Notes(); len(notes) != 1 || !strings.Contains(notes[0], strconv.Itoa(dead)) {
		t.Errorf("notes %q", notes)
	}
}

func TestConcurrentOpen(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	path := d.Path()
	d.Close()
	const n = 8
	results := make(chan error, n)
	opened := make(chan *Dir, n)
	for range n {
		go func() {
			d, err := Open(path)
			if err == nil {
				opened <- d
			}
			results <- err
		}()
	}
	wins := 0
	for range n {
		err := <-results
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, ErrInUse):
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d concurrent Opens succeeded, want 1", wins)
	}
	close(opened)
	for d := range opened {
		d.Close()
	}
}
