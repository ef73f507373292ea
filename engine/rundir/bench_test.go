package rundir

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkLogMetrics measures one metrics record of 16 values (encode,
// one write call).
func BenchmarkLogMetrics(b *testing.B) {
	d, err := Create(b.TempDir(), "bench", t0)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	m := map[string]float64{}
	for i := range 16 {
		m["metric/"+string(rune('a'+i))] = float64(i) / 3
	}
	b.ResetTimer()
	for i := range b.N {
		if err := d.LogMetrics(i, m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommit64MiB measures committing a checkpoint of two 32 MiB
// files: fsync, CRC-32C, marker, rename. SetBytes makes -bench report the
// checksum throughput.
func BenchmarkCommit64MiB(b *testing.B) {
	d, err := Create(b.TempDir(), "bench", t0)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	data := make([]byte, 32<<20)
	for i := range data {
		data[i] = byte(i * 31)
	}
	b.SetBytes(2 * int64(len(data)))
	for i := range b.N {
		b.StopTimer()
		p, err := d.BeginCheckpoint(i)
		if err != nil {
			b.Fatal(err)
		}
		for _, role := range []string{"policy", "value"} {
			dir, _ := p.RoleDir(role)
			if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := p.Commit(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := d.Prune(1); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
