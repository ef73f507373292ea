package runtime

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"unicode/utf8"

	"stx.dev/stx/runtime/chat"
	"stx.dev/stx/runtime/tokenizer"
)

// ModelTokenizer returns the tokenizer of a model: the byte-level one for the built-in
// configs, or tokenizer.json from the model directory dir ("" when the model is built in).
func ModelTokenizer(m *Model, dir string) (tokenizer.Tokenizer, error) {
	if m.Config.BuiltinTokenizer == "byte" {
		return tokenizer.NewByte(), nil
	}
	if dir == "" {
		return nil, fmt.Errorf("the model has no built-in tokenizer and no directory to load tokenizer.json from")
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return nil, fmt.Errorf("model %s has no tokenizer.json: %w", dir, err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the tokenizer of %s: %w", dir, err)
	}
	return tok, nil
}

// ScoreRecord is one output line of ScoreJSONL.
type ScoreRecord struct {
	Index     int       `json:"index"`      // 0-based record number in the input
	Tokens    []int32   `json:"tokens"`     // the scored sequence
	LogProbs  []float32 `json:"logprobs"`   // log p(tokens[t+1] | tokens[≤t]), t = 0..n−2
	NumTokens int       `json:"num_tokens"` // len(LogProbs)
	MeanNLL   float64   `json:"mean_nll"`   // −mean(LogProbs); 0 when there is none
}

// ScoreSummary aggregates a ScoreJSONL run over all scored tokens.
type ScoreSummary struct {
	Records    int     `json:"records"`
	Tokens     int     `json:"tokens"`
	MeanNLL    float64 `json:"mean_nll"`
	Perplexity float64 `json:"perplexity"`
}

// scoreInput is one input line: token ids, text to tokenize, or a
// conversation to render with the chat template.
type scoreInput struct {
	Tokens   []int32         `json:"tokens"`
	Text     *string         `json:"text"`
	Messages json.RawMessage `json:"messages"`
}

// ScoreJSONL reads records ({"tokens": [...]}, {"text": "..."} or {"messages": [{"role": ...,
// "content": ...}, ...]}) from r, one JSON object per line, and writes one ScoreRecord per
// record to w, scoring batchSize records per forward pass. Text is tokenized with tok, with the
// tokenizer's BOS prepended when it has one (so the first token is scored too); tok may be nil
// when every record gives tokens. Conversations are rendered with the chat template tmpl
// (without a generation prompt) and tokenized as they are: the template writes BOS and the
// other special tokens itself. tmpl may be nil when no record is a conversation.
func ScoreJSONL(r io.Reader, w io.Writer, sc *Scorer, tok tokenizer.Tokenizer, tmpl *chat.Template, batchSize int) (ScoreSummary, error) {
	if batchSize <= 0 {
		batchSize = 8
	}
	var sum ScoreSummary
	nll := 0.0
	enc := json.NewEncoder(w)
	var pending [][]int32
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		scored, err := sc.Score(pending)
		if err != nil {
			return err
		}
		for i, s := range scored {
			rec := ScoreRecord{Index: sum.Records, Tokens: pending[i], LogProbs: s.LogProbs, NumTokens: len(s.LogProbs)}
			total := 0.0
			for _, lp := range s.LogProbs {
				total -= float64(lp)
			}
			if rec.NumTokens > 0 {
				rec.MeanNLL = total / float64(rec.NumTokens)
			}
			if rec.LogProbs == nil {
				rec.LogProbs = []float32{}
			}
			nll += total
			sum.Tokens += rec.NumTokens
			sum.Records++
			if err := enc.Encode(rec); err != nil {
				return fmt.Errorf("writing scores: %w", err)
			}
		}
		pending = pending[:0]
		return nil
	}
	in := bufio.NewReader(r)
	line := 0
	for {
		raw, err := readBoundedLine(in, maxScoreLine)
		if errors.Is(err, errLongLine) {
			return sum, &LineError{Line: line + 1, Err: err}
		}
		if len(raw) > 0 {
			line++
			if trimmed := trimSpace(raw); len(trimmed) > 0 {
				seq, perr := parseScoreInput(trimmed, tok, tmpl)
				if perr != nil {
					return sum, &LineError{Line: line, Err: perr}
				}
				pending = append(pending, seq)
				if len(pending) == batchSize {
					if ferr := flush(); ferr != nil {
						return sum, &LineError{Line: line, Err: ferr}
					}
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, fmt.Errorf("reading records: %w", err)
		}
	}
	if err := flush(); err != nil {
		return sum, &LineError{Line: line, Err: err}
	}
	if sum.Tokens > 0 {
		sum.MeanNLL = nll / float64(sum.Tokens)
		sum.Perplexity = math.Exp(sum.MeanNLL)
	}
	return sum, nil
}

// maxScoreLine bounds one record of `stx score`: a huge file without a
// newline is refused instead of read into memory.
const maxScoreLine = 64 << 20

var errLongLine = fmt.Errorf("record longer than %d MiB", maxScoreLine>>20)

// readBoundedLine reads one line (with its newline) of at most max bytes.
func readBoundedLine(in *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := in.ReadSlice('\n')
		if len(line)+len(part) > max {
			return nil, errLongLine
		}
		line = append(line, part...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

func parseScoreInput(raw []byte, tok tokenizer.Tokenizer, tmpl *chat.Template) ([]int32, error) {
	// JSON decoding would turn invalid bytes into U+FFFD and score other text.
	if !utf8.Valid(raw) {
		return nil, errors.New("the record is not valid UTF-8")
	}
	var in scoreInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("not a JSON record: %w", err)
	}
	kinds := 0
	for _, given := range []bool{in.Tokens != nil, in.Text != nil, in.Messages != nil} {
		if given {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, fmt.Errorf("record has more than one of \"tokens\", \"text\" and \"messages\"")
	case in.Messages != nil:
		if tok == nil {
			return nil, fmt.Errorf("a \"messages\" record needs a tokenizer, and this model has none; give \"tokens\"")
		}
		if tmpl == nil {
			return nil, fmt.Errorf("a \"messages\" record needs a chat template, and this model has none")
		}
		var msgs []map[string]json.RawMessage
		if err := json.Unmarshal(in.Messages, &msgs); err != nil || len(msgs) == 0 {
			return nil, fmt.Errorf("\"messages\" is not a non-empty list of objects")
		}
		text, err := tmpl.RenderWith(in.Messages, false, nil)
		if err != nil {
			return nil, err
		}
		seq := tok.Encode(text)
		if len(seq) == 0 {
			return nil, fmt.Errorf("the chat template rendered the messages as empty text")
		}
		return seq, nil
	case in.Tokens != nil:
		if len(in.Tokens) == 0 {
			return nil, fmt.Errorf("record has an empty \"tokens\" list")
		}
		return in.Tokens, nil
	case in.Text != nil:
		if tok == nil {
			return nil, fmt.Errorf("a \"text\" record needs a tokenizer, and this model has none; give \"tokens\"")
		}
		var seq []int32
		if b := tok.BOS(); b >= 0 {
			seq = append(seq, b)
		}
		seq = append(seq, tok.Encode(*in.Text)...)
		if len(seq) == 0 {
			return nil, fmt.Errorf("record's text is empty and the tokenizer has no BOS")
		}
		return seq, nil
	}
	return nil, fmt.Errorf("record has none of \"tokens\", \"text\" and \"messages\"")
}

// LineError is a problem with one line of a JSONL input.
type LineError struct {
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }
