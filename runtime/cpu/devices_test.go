package cpu

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func TestDevicesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  string
		want int
		err  string
	}{
		{"", 1, ""},
		{"devices=4", 4, ""},
		{" devices = 2 ,", 2, ""},
		{"devices=0", 0, "devices=0: want a whole number from 1 to 64"},
		{"devices=x", 0, "devices=x"},
		{"device=2", 0, `unknown configuration "device=2"`},
	} {
		b, err := New(tc.cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("New(%q) = %v, want error containing %q", tc.cfg, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("New(%q): %v", tc.cfg, err)
		}
		if got := b.NumDevices(); got != tc.want {
			t.Errorf("New(%q).NumDevices() = %d, want %d", tc.cfg, got, tc.want)
		}
	}
}

func TestBuffersOnDevices(t *testing.T) {
	be, err := New("devices=3")
	if err != nil {
		t.Fatal(err)
	}
	x := tensors.FromValue([]float32{1, 2, 3})
	buf, err := x.Buffer(be, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := be.BufferDeviceNum(buf); d != 2 {
		t.Errorf("buffer on device %d, want 2", d)
	}
	c, err := be.BufferCopyToDevice(buf, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := be.BufferDeviceNum(c); d != 1 {
		t.Errorf("copy on device %d, want 1", d)
	}
	got := make([]float32, 3)
	if err := be.BufferToFlatData(c, got); err != nil || got[2] != 3 {
		t.Errorf("copy holds %v (%v)", got, err)
	}
	if _, err := be.BufferCopyToDevice(buf, 3); err == nil || !strings.Contains(err.Error(), "3 device(s), got device 3") {
		t.Errorf("copy to device 3: %v", err)
	}
}

// TestSPMDAllReduce runs a program on 4 replicas through GoMLX's SPMD strategy: each replica
// gets its own input, and the collectives see all of them.
func TestSPMDAllReduce(t *testing.T) {
	be, err := New("devices=4")
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := distributed.NewDeviceMesh([]int{4}, []string{"data"})
	if err != nil {
		t.Fatal(err)
	}
	exec, err := graph.NewExec(be, func(x *graph.Node) (sum, mx, local *graph.Node) {
		d := x.Graph().Distributed()
		sum = d.AllReduceOne(x, backends.ReduceOpSum)
		mx = x.Graph().Distributed().AllReduceOne(x, backends.ReduceOpMax)
		return sum, mx, graph.MulScalar(x, 2)
	})
	if err != nil {
		t.Fatal(err)
	}
	exec.SPMD(mesh)
	var args []any
	for i := range 4 {
		args = append(args, []float32{float32(i), float32(10 * i)})
	}
	outs, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 12 {
		t.Fatalf("%d outputs, want 4 replicas × 3", len(outs))
	}
	for i := range 4 {
		sum := outs[3*i].Value().([]float32)
		mx := outs[3*i+1].Value().([]float32)
		local := outs[3*i+2].Value().([]float32)
		if sum[0] != 6 || sum[1] != 60 || mx[0] != 3 || mx[1] != 30 || local[0] != float32(2*i) {
			t.Errorf("replica %d: sum %v, max %v, local %v", i, sum, mx, local)
		}
	}

	// Two groups of two: AllReduce along one axis of a 2×2 mesh.
	mesh2, err := distributed.NewDeviceMesh([]int{2, 2}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	exec2, err := graph.NewExec(be, func(x *graph.Node) *graph.Node {
		return x.Graph().Distributed().Along("b").AllReduceOne(x, backends.ReduceOpSum)
	})
	if err != nil {
		t.Fatal(err)
	}
	exec2.SPMD(mesh2)
	outs, err = exec2.Exec(float32(1), float32(2), float32(3), float32(4))
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{3, 3, 7, 7}
	for i, o := range outs {
		if got := o.Value().(float32); got != want[i] {
			t.Errorf("replica %d: %v, want %v", i, got, want[i])
		}
	}
}

// TestSPMDFailureReleasesReplicas: a replica failing before a collective must not leave the
// others waiting in it.
func TestSPMDFailureReleasesReplicas(t *testing.T) {
	be, err := New("devices=2")
	if err != nil {
		t.Fatal(err)
	}
	b := be.Builder("fail")
	if err := b.DistributedSPMD(2); err != nil {
		t.Fatal(err)
	}
	x, _ := b.Parameter("x", tensors.FromValue([]int32{1}).Shape(), nil)
	y, _ := b.Parameter("y", tensors.FromValue([]int32{1}).Shape(), nil)
	q, err := b.Div(x, y) // integer division by zero panics in the replica that gets y = 0
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.AllReduce([]backends.Op{q}, backends.ReduceOpSum, [][]int{{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var in []backends.Buffer
	for _, v := range []int32{4, 2, 4, 0} {
		buf, err := be.BufferFromFlatData(0, []int32{v}, tensors.FromValue([]int32{1}).Shape())
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, buf)
	}
	_, err = exe.Execute(in, nil, 0)
	if err == nil || !strings.Contains(err.Error(), "replica 1") {
		t.Errorf("Execute = %v, want replica 1's failure", err)
	}
	b2 := be.Builder("groups")
	if err := b2.DistributedSPMD(2); err != nil {
		t.Fatal(err)
	}
	x2, _ := b2.Parameter("x", tensors.FromValue([]int32{1}).Shape(), nil)
	if _, err := b2.AllReduce([]backends.Op{x2}, backends.ReduceOpSum, [][]int{{0, 2}}); err == nil ||
		!strings.Contains(err.Error(), "names replica 2") {
		t.Errorf("AllReduce with replica 2 of 2: %v", err)
	}
	if err := be.Builder("x").DistributedSPMD(3); err == nil {
		t.Error("DistributedSPMD(3) accepted on 2 devices")
	}
}
