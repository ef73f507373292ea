package engine
import ("testing";"time";"path/filepath";"stx.dev/stx/schema")
func TestZZTime(t *testing.T){ 
	_, err := Load([]string{filepath.Join("..", "recipes.cue")}, schema.Options{Dir: "."})
	if err != nil { t.Log(err) }
	var best time.Duration = 1<<62
	for i:=0;i<15;i++{ t0:=time.Now(); Load([]string{filepath.Join("..", "recipes.cue")}, schema.Options{Dir: "."}); if d:=time.Since(t0); d<best {best=d} }; t.Logf("best load %v", best)}
