package workflow

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
)

// ServeCalculator is the built-in example environment (`stx env
// calculator`): a calculator tool for arithmetic word problems. Its first
// observation is the task's prompt. An action
//
//	calc: <expression>   observes "result: <value>\n" (+ - * / and parentheses
//	                     over integers and decimals, exact rational arithmetic)
//	answer: <number>     ends the episode: reward 1 if it equals the task's
//	                     answer, else 0 (info.is_correct says which)
//
// A bare number is taken as an answer; anything else observes a usage line.
// It serves requests from in until EOF, answering on out.
func ServeCalculator(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	enc := json.NewEncoder(out)
	var answer *big.Rat // nil: no episode
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var req struct {
			Op     string         `json:"op"`
			Task   map[string]any `json:"task"`
			Action string         `json:"action"`
		}
		var rep map[string]any
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			rep = map[string]any{"error": fmt.Sprintf("request is not JSON: %v", err)}
		} else {
			switch req.Op {
			case "reset":
				var obs string
				answer, obs, err = calcReset(req.Task)
				if err != nil {
					rep = map[string]any{"error": err.Error()}
				} else {
					rep = map[string]any{"observation": obs}
				}
			case "step":
				if answer == nil {
					rep = map[string]any{"error": "step before reset"}
					break
				}
				rep = calcStep(req.Action, answer)
				if rep["done"] == true {
					answer = nil
				}
			default:
				rep = map[string]any{"error": fmt.Sprintf("unknown op %q (want reset or step)", req.Op)}
			}
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return sc.Err()
}

// calcReset reads the task's prompt and answer.
func calcReset(task map[string]any) (*big.Rat, string, error) {
	prompt, ok := task["prompt"].(string)
	if !ok {
		return nil, "", errors.New(`task has no "prompt" string`)
	}
	var text string
	switch a := task["answer"].(type) {
	case string:
		text = a
	case float64:
		text = fmt.Sprint(a)
	default:
		return nil, "", errors.New(`task has no "answer"`)
	}
	ans, err := evalExpr(text)
	if err != nil {
		return nil, "", fmt.Errorf("task answer %q is not a number: %v", text, err)
	}
	return ans, prompt, nil
}

const calcUsage = "use calc: <expression> or answer: <number>\n"

func calcStep(action string, answer *big.Rat) map[string]any {
	a := strings.TrimSpace(action)
	low := strings.ToLower(a)
	switch {
	case strings.HasPrefix(low, "calc:"):
		v, err := evalExpr(strings.TrimSpace(a[len("calc:"):]))
		if err != nil {
			return map[string]any{"observation": "error: " + err.Error() + "\n", "reward": 0.0, "done": false}
		}
		return map[string]any{"observation": "result: " + formatRat(v) + "\n", "reward": 0.0, "done": false}
	case strings.HasPrefix(low, "answer:"):
		a = a[len("answer:"):]
	default:
		if _, err := evalNumber(a); err != nil {
			return map[string]any{"observation": calcUsage, "reward": 0.0, "done": false}
		}
	}
	v, err := evalNumber(a)
	correct := err == nil && v.Cmp(answer) == 0
	reward := 0.0
	if correct {
		reward = 1
	}
	return map[string]any{"observation": "", "reward": reward, "done": true, "info": map[string]any{"is_correct": correct}}
}

// evalNumber parses a (possibly signed) number: an answer, not an expression.
func evalNumber(s string) (*big.Rat, error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	if s == "" {
		return nil, errors.New("empty number")
	}
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 || strings.Trim(digits, "0123456789.") != "" || strings.Count(digits, ".") > 1 {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	v, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	return v, nil
}

// formatRat prints an integer as such and other values with up to 6
// decimals; a value that rounds to zero prints 0, never -0.
func formatRat(v *big.Rat) string {
	if v.IsInt() {
		return v.Num().String()
	}
	s := strings.TrimRight(v.FloatString(6), "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// Expressions are bounded so that a model cannot make the tool slow.
const (
	maxExprLen   = 200
	maxExprDepth = 32
	maxExprBits  = 4096
)

// evalExpr evaluates + - * / with parentheses and unary minus.
func evalExpr(s string) (*big.Rat, error) {
	if len(s) > maxExprLen {
		return nil, fmt.Errorf("expression longer than %d characters", maxExprLen)
	}
	p := &exprParser{s: s}
	v, err := p.sum(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.s) {
		return nil, fmt.Errorf("unexpected %q at %d", p.s[p.i:p.i+1], p.i+1)
	}
	return v, nil
}

type exprParser struct {
	s string
	i int
}

func (p *exprParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *exprParser) sum(depth int) (*big.Rat, error) {
	v, err := p.product(depth)
	if err != nil {
		return nil, err
	}
	for {
		p.space()
		if p.i >= len(p.s) || (p.s[p.i] != '+' && p.s[p.i] != '-') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		w, err := p.product(depth)
		if err != nil {
			return nil, err
		}
		if op == '+' {
			v.Add(v, w)
		} else {
			v.Sub(v, w)
		}
		if err := bounded(v); err != nil {
			return nil, err
		}
	}
}

func (p *exprParser) product(depth int) (*big.Rat, error) {
	v, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for {
		p.space()
		if p.i >= len(p.s) || (p.s[p.i] != '*' && p.s[p.i] != '/' && p.s[p.i] != 'x') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		w, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		if op == '/' {
			if w.Sign() == 0 {
				return nil, errors.New("division by zero")
			}
			v.Quo(v, w)
		} else {
			v.Mul(v, w)
		}
		if err := bounded(v); err != nil {
			return nil, err
		}
	}
}

func (p *exprParser) unary(depth int) (*big.Rat, error) {
	if depth > maxExprDepth {
		return nil, fmt.Errorf("expression nested deeper than %d", maxExprDepth)
	}
	p.space()
	if p.i < len(p.s) && (p.s[p.i] == '-' || p.s[p.i] == '+') {
		neg := p.s[p.i] == '-'
		p.i++
		v, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		if neg {
			v.Neg(v)
		}
		return v, nil
	}
	if p.i < len(p.s) && p.s[p.i] == '(' {
		p.i++
		v, err := p.sum(depth + 1)
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, fmt.Errorf("missing ) at %d", p.i+1)
		}
		p.i++
		return v, nil
	}
	start := p.i
	for p.i < len(p.s) && (p.s[p.i] >= '0' && p.s[p.i] <= '9' || p.s[p.i] == '.' || p.s[p.i] == ',') {
		p.i++
	}
	if start == p.i {
		if p.i >= len(p.s) {
			return nil, errors.New("expression ends early")
		}
		return nil, fmt.Errorf("unexpected %q at %d", p.s[p.i:p.i+1], p.i+1)
	}
	return evalNumber(p.s[start:p.i])
}

func bounded(v *big.Rat) error {
	if v.Num().BitLen() > maxExprBits || v.Denom().BitLen() > maxExprBits {
		return errors.New("result too large")
	}
	return nil
}
