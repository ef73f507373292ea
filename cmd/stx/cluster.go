package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/urfave/cli/v2"

	"stx.dev/stx/cluster"
	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/xlaplugin"
	"stx.dev/stx/schema"
)

// clusterFlags are run's flags for a run spread over several processes (one per machine).
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "nodes", DefaultText: "1", Usage: "run on `N` processes (nodes), one per machine (else $STX_NODES, $WORLD_SIZE, $SLURM_NTASKS with a coordinator)"},
		&cli.IntFlag{Name: "node-rank", Usage: "this process's rank `I`, 0 to N-1 (else $STX_NODE_RANK, $RANK, $SLURM_PROCID with a coordinator, $JOB_COMPLETION_INDEX)"},
		&cli.StringFlag{Name: "coordinator", Usage: "node 0's `HOST:PORT`, where it serves the group's key-value store (else $STX_COORDINATOR, $MASTER_ADDR:$MASTER_PORT)"},
		&cli.DurationFlag{Name: "cluster-timeout", Value: 5 * time.Minute, Usage: "how long the nodes wait for each other to start and agree, a `DURATION`"},
	}
}

// resolveLaunch reads this process's place from the flags and the launchers' variables.
func resolveLaunch(c *cli.Context) (cluster.Launch, error) {
	l, err := cluster.Resolve(cluster.Flags{
		Nodes: c.Int("nodes"), NodesSet: c.IsSet("nodes"),
		Node: c.Int("node-rank"), NodeSet: c.IsSet("node-rank"),
		Coordinator: c.String("coordinator"),
	}, os.Getenv)
	if err != nil {
		return l, usagef("%v", err)
	}
	return l, nil
}

// storeKV lets a PJRT plugin use the group's store (xlaplugin.KeyValueStore).
type storeKV struct {
	ctx    context.Context
	client *cluster.Client
}

// timeoutError marks a get that timed out, which the plugin must see as DEADLINE_EXCEEDED.
type timeoutError struct{ error }

func (timeoutError) Timeout() bool { return true }

func (s storeKV) Get(key string, timeout time.Duration) ([]byte, error) {
	v, err := s.client.Get(s.ctx, key, timeout)
	if errors.Is(err, cluster.ErrTimeout) {
		return nil, timeoutError{err}
	}
	return v, err
}

func (s storeKV) TryGet(key string) ([]byte, bool, error) { return s.client.TryGet(s.ctx, key) }
func (s storeKV) Put(key string, value []byte) error      { return s.client.Put(s.ctx, key, value) }

// runOnNodes is `stx run` on several nodes: node 0 serves the group's store, every node joins
// it, the nodes check that they run the same recipe, and each creates its PJRT client as a
// node of the group (the plugin exchanging its topology through the store). Any node's error
// fails the group, so every process exits non-zero with it.
//
// What stops it today: XLA's CPU plugin cannot join processes (xlaplugin.SingleProcessError),
// and on a GPU plugin, whose client spans the nodes, stx's training loop would still drive
// one process's devices only (GoMLX v0.26 feeds every device of a program from the process
// that runs it), so the run stops after the client is formed, saying so.
func runOnNodes(c *cli.Context, l cluster.Launch, cat *schema.Catalog, name string) (err error) {
	spec := c.String("backend")
	if spec == "" {
		spec = os.Getenv(backends.ConfigEnvVar)
	}
	norm, err := runtime.NormalizeBackendSpec(spec)
	if err != nil {
		return err
	}
	if kind, _, _ := strings.Cut(norm, ":"); kind != "xla" {
		return usagef("a run on %d nodes needs the xla backend with a GPU plugin (--backend xla:cuda: NCCL across processes), not %q", l.Nodes, norm)
	}
	timeout := c.Duration("cluster-timeout")
	opt, err := heartbeatOptions()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	if l.Node == 0 {
		coord, serveErr := cluster.Serve(l.Coordinator, l.Nodes, opt)
		if serveErr != nil {
			return serveErr
		}
		defer func() {
			if err != nil {
				// Tells the others at once, also when node 0 failed before it joined.
				coord.Fail(fmt.Errorf("node 0 failed: %w", err))
			}
			// Node 0 serves until the others have left (they stop at the failure).
			_ = coord.Close(10 * time.Second)
		}()
	}
	client, err := cluster.Join(ctx, l.Coordinator, l.Node, l.Nodes, timeout, opt)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			client.Fail(err)
		} else {
			client.Leave()
		}
	}()
	// The heartbeat learns of the group's failure first; the wait it interrupts then reports
	// that failure, not a bare cancellation.
	var failure atomic.Value
	client.StartHeartbeat(func(err error) { failure.Store(err); cancel() })
	err = nodeRun(ctx, c, l, client, cat, name, norm, timeout)
	if f, ok := failure.Load().(error); ok && err != nil && ctx.Err() != nil {
		err = fmt.Errorf("node %d: %w", l.Node, f)
	}
	return err
}

// nodeRun is a node's part once it joined: wait for the others, agree on the recipe, create
// the PJRT client as a node of the group.
func nodeRun(ctx context.Context, c *cli.Context, l cluster.Launch, client *cluster.Client, cat *schema.Catalog, name, backend string, timeout time.Duration) error {
	if err := client.Barrier(ctx, "joined", timeout); err != nil {
		return fmt.Errorf("waiting for the %d nodes to join at %s: %w", l.Nodes, l.Coordinator, err)
	}
	if err := sameRecipe(ctx, client, cat, name, timeout); err != nil {
		return err
	}
	// No node goes on before every node has compared: one that disagrees fails the group.
	if err := client.Barrier(ctx, "same recipe", timeout); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "stx: node %d of %d joined the group at %s\n", l.Node, l.Nodes, l.Coordinator)
	xlaplugin.SetCluster(&xlaplugin.Cluster{Node: l.Node, Nodes: l.Nodes, KV: storeKV{ctx, client}})
	defer xlaplugin.SetCluster(nil)
	be, err := runtime.NewBackend(backend)
	if err != nil {
		return fmt.Errorf("node %d: %w", l.Node, err)
	}
	defer be.Finalize()
	top, _ := xlaplugin.LastClient()
	if top.Devices <= top.Addressable {
		return fmt.Errorf("node %d: the PJRT client lists only this process's %d device(s): the plugin did not join the other %d node(s)",
			l.Node, top.Addressable, l.Nodes-1)
	}
	return fmt.Errorf("node %d: one PJRT client over %d devices of %d nodes (this node: process %d, %d devices); "+
		"training across processes is not implemented yet: GoMLX v0.26 runs a program on the devices of one process (docs/multinode.md)",
		l.Node, top.Devices, l.Nodes, top.ProcessIndex, top.Addressable)
}

// heartbeatOptions reads $STX_CLUSTER_HEARTBEAT, the nodes' heartbeat interval (default 1s); a
// node is lost after 15 missed heartbeats. Every node must use the same value.
func heartbeatOptions() (cluster.Options, error) {
	v := os.Getenv("STX_CLUSTER_HEARTBEAT")
	if v == "" {
		return cluster.Options{}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return cluster.Options{}, usagef("$STX_CLUSTER_HEARTBEAT=%q: want a positive duration (1s, 200ms)", v)
	}
	return cluster.Options{Heartbeat: d}, nil
}

// sameRecipe checks that every node resolved the same recipe (files, --set values and
// environment included): node 0 publishes its hash, the others compare.
func sameRecipe(ctx context.Context, client *cluster.Client, cat *schema.Catalog, name string, timeout time.Duration) error {
	js, err := json.Marshal(cat.Recipes[name])
	if err != nil {
		return fmt.Errorf("hashing the recipe: %w", err)
	}
	mine := fmt.Sprintf("%s %x", name, sha256.Sum256(js))
	if client.Node == 0 {
		return client.Put(ctx, "stx/recipe", []byte(mine))
	}
	theirs, err := client.Get(ctx, "stx/recipe", timeout)
	if err != nil {
		return fmt.Errorf("node %d: reading node 0's recipe: %w", client.Node, err)
	}
	if string(theirs) != mine {
		return fmt.Errorf("node %d runs recipe %s, node 0 runs %s (name and sha256 of the resolved recipe): every node must run the same recipe files, --set values and STX_ variables",
			client.Node, short(mine), short(string(theirs)))
	}
	return nil
}

// short abbreviates "name hash" to the hash's first 12 digits.
func short(s string) string {
	name, hash, _ := strings.Cut(s, " ")
	if len(hash) > 12 {
		hash = hash[:12]
	}
	return name + " (" + hash + ")"
}
