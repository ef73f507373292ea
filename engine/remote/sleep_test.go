package remote

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// pathRecorder is a server that records the paths (with queries) posted to it and fails
// them with HTTP 500 while failing is set.
type pathRecorder struct {
	mu      sync.Mutex
	paths   []string
	failing bool
	srv     *httptest.Server
}

func (p *pathRecorder) got() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.paths, ",")
}

func (p *pathRecorder) fail() {
	p.mu.Lock()
	p.failing = true
	p.mu.Unlock()
}

func newPathRecorder(t *testing.T) *pathRecorder {
	p := &pathRecorder{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.paths = append(p.paths, r.Method+" "+r.URL.RequestURI())
		if p.failing {
			http.Error(w, "no", 500)
			return
		}
		w.Write([]byte("null"))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// TestSleepWakeUp: the client asks every server to release and take back its memory with
// the endpoints of its engine; a server that fails is an event, and waking up fails only
// when no server woke.
func TestSleepWakeUp(t *testing.T) {
	for _, c := range []struct{ engine, sleep, wake string }{
		{SGLang, "POST /release_memory_occupation", "POST /resume_memory_occupation"},
		{OpenAI, "POST /sleep?level=1", "POST /wake_up"},
	} {
		a, b := newPathRecorder(t), newPathRecorder(t)
		cl, err := New(Config{Engine: c.engine, Servers: []string{a.srv.URL, b.srv.URL}, Vocab: 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Sleep(); err != nil {
			t.Fatal(err)
		}
		b.fail()
		if err := cl.WakeUp(); err != nil {
			t.Fatalf("%s: one server woke up: %v", c.engine, err)
		}
		if want := c.sleep + "," + c.wake; a.got() != want || b.got() != want {
			t.Errorf("%s: paths %s and %s, want %s", c.engine, a.got(), b.got(), want)
		}
		ev := cl.TakeEvents()
		if len(ev) != 1 || ev[0].Type != "remote_wake_up_failed" || ev[0].Server != b.srv.URL {
			t.Errorf("%s: events %+v", c.engine, ev)
		}
		if m := cl.Metrics(); m["remote/sleep_s"] <= 0 || m["remote/wake_up_s"] <= 0 || m["remote/server1/failures"] != 1 {
			t.Errorf("%s: metrics %v", c.engine, m)
		}
		a.fail()
		if err := cl.Sleep(); err == nil {
			t.Errorf("%s: sleep with every server failing: no error", c.engine)
		}
		if err := cl.WakeUp(); err == nil || !strings.Contains(err.Error(), "no server woke up") {
			t.Errorf("%s: wake up with every server failing: %v", c.engine, err)
		}
	}
}

// TestOldestWeightVersion: the metrics say the oldest weight version of the answers taken.
func TestOldestWeightVersion(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.version, b.version = 3, 2
	c := newClient(t, Config{ShardRows: 2}, a, b)
	c.SetMinVersion(2)
	if _, err := c.Generate(prompts(4), opts()); err != nil {
		t.Fatal(err)
	}
	if m := c.Metrics(); m["remote/oldest_weight_version"] != 2 {
		t.Errorf("oldest weight version %v, want 2", m["remote/oldest_weight_version"])
	}
	if _, ok := c.Metrics()["remote/oldest_weight_version"]; ok {
		t.Error("oldest weight version without answers")
	}
}
