//go:build race

package cpu_test

// raceEnabled: the race detector slows SimpleGo down ~20×; the bench-model comparison then
// takes minutes, and it checks numbers, not concurrency.
const raceEnabled = true
