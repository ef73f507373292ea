package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// console prints one progress line per rollout: plain lines ending in a
// newline (no carriage returns or colours), so a terminal and a log file show
// the same thing. JSON mode prints the same facts as one object per line.
type console struct {
	w     io.Writer
	quiet bool
	json  bool
}

func (c *console) printf(format string, args ...any) {
	if c.quiet || c.json || c.w == nil {
		return
	}
	fmt.Fprintf(c.w, format, args...)
}

// event prints a JSON object in JSON mode (kind names the object).
func (c *console) event(kind string, fields map[string]any) {
	if !c.json || c.w == nil {
		return
	}
	fields["kind"] = kind
	data, err := json.Marshal(sanitize(fields))
	if err != nil {
		return
	}
	fmt.Fprintf(c.w, "%s\n", data)
}

// sanitize replaces non-finite floats, which JSON cannot carry, with strings.
func sanitize(m map[string]any) map[string]any {
	for k, v := range m {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			m[k] = fmt.Sprint(f)
		}
		if mm, ok := v.(map[string]float64); ok {
			o := map[string]any{}
			for kk, f := range mm {
				o[kk] = f
			}
			m[k] = sanitize(o)
		}
	}
	return m
}

// progress reports rollout id (0-based) of total.
func (c *console) progress(id, total int, m map[string]float64, elapsed, eta time.Duration) {
	if c.json {
		c.event("rollout", map[string]any{"rollout": id + 1, "num_rollout": total, "metrics": m,
			"elapsed_s": elapsed.Seconds(), "eta_s": eta.Seconds()})
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %d/%d", id+1, total)
	if _, v, ok := pickReward(m); ok {
		fmt.Fprintf(&b, "  reward %.3f", v)
	}
	if name, v, ok := pick(m, "/loss"); ok {
		fmt.Fprintf(&b, "  loss %.4f", v)
		_ = name
	}
	for _, suffix := range []string{"/kl_loss", "/ppo_kl", "/teacher_kl"} {
		if _, v, ok := pick(m, suffix); ok {
			fmt.Fprintf(&b, "  kl %.4f", v)
			break
		}
	}
	if _, v, ok := pick(m, "/accuracy"); ok {
		fmt.Fprintf(&b, "  acc %.3f", v)
	}
	if v, ok := m["val/accuracy"]; ok {
		fmt.Fprintf(&b, "  val_acc %.3f", v)
	}
	if v, ok := m["val/teacher_kl"]; ok {
		fmt.Fprintf(&b, "  val_teacher_kl %.3f", v)
	}
	if v, ok := m["perf/tokens_per_s"]; ok && v > 0 {
		fmt.Fprintf(&b, "  %.0f tok/s", v)
	}
	fmt.Fprintf(&b, "  ETA %s", eta.Round(time.Second))
	c.printf("%s\n", b.String())
}

// pick returns the first metric (sorted by name) ending in suffix.
// pickReward finds the mean reward of the first role (reward/<role>/mean).
func pickReward(m map[string]float64) (string, float64, bool) {
	var names []string
	for k := range m {
		if strings.HasPrefix(k, "reward/") && strings.HasSuffix(k, "/mean") {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "", 0, false
	}
	sort.Strings(names)
	return names[0], m[names[0]], true
}

func pick(m map[string]float64, suffix string) (string, float64, bool) {
	var names []string
	for k := range m {
		if strings.HasSuffix(k, suffix) && !strings.HasPrefix(k, "val/") {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "", 0, false
	}
	sort.Strings(names)
	return names[0], m[names[0]], true
}
