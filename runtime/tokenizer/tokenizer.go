// Package tokenizer turns text into token ids and back: a byte-level
// tokenizer for tests and tiny models, and Hugging Face tokenizer.json BPE
// for real checkpoints: byte-level (the GPT-2 / Llama-3 / Qwen2 family) and
// SentencePiece style with byte fallback (Llama 2, Mistral, Gemma).
package tokenizer

// Tokenizer converts between text and token ids.
type Tokenizer interface {
	// Encode tokenizes text without adding special tokens (no BOS/EOS).
	// Special tokens written literally in the text are recognised.
	Encode(text string) []int32
	// Decode turns ids back into text, skipping special tokens and ids
	// outside the vocabulary, as transformers' decode(ids,
	// skip_special_tokens=True) does (with clean_up_tokenization_spaces
	// where the tokenizer's configuration sets it).
	Decode(ids []int32) string
	// VocabSize is one more than the largest id Encode can return.
	VocabSize() int
	// BOS, EOS and PAD are the special token ids; -1 where there is none.
	BOS() int32
	EOS() int32
	PAD() int32
	// StopTokens is the set of ids that end a generation (EOS and, for
	// instruct models, end-of-turn tokens), without repeats; empty if none.
	StopTokens() []int32
	// Name identifies the tokenizer in logs and metrics.
	Name() string
}

// Both implementations satisfy Tokenizer.
var (
	_ Tokenizer = (*Byte)(nil)
	_ Tokenizer = (*BPE)(nil)
)

// Byte is the byte-level tokenizer: ids 0..255 are the bytes of the UTF-8
// text, 256 is PAD, 257 BOS and 258 EOS.
type Byte struct{}

// Special ids of the Byte tokenizer.
const (
	BytePAD int32 = 256
	ByteBOS int32 = 257
	ByteEOS int32 = 258
)

// NewByte returns the byte-level tokenizer.
func NewByte() *Byte { return &Byte{} }

// Encode returns one id per byte of text.
func (*Byte) Encode(text string) []int32 {
	ids := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int32(text[i])
	}
	return ids
}

// Decode concatenates the bytes of ids 0..255 and skips all others. The
// result holds exactly those bytes, even where they are not valid UTF-8.
func (*Byte) Decode(ids []int32) string {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}

// VocabSize is 259: 256 bytes and three specials.
func (*Byte) VocabSize() int { return 259 }

// BOS returns 257.
func (*Byte) BOS() int32 { return ByteBOS }

// EOS returns 258.
func (*Byte) EOS() int32 { return ByteEOS }

// StopTokens returns EOS alone.
func (*Byte) StopTokens() []int32 { return []int32{ByteEOS} }

// PAD returns 256.
func (*Byte) PAD() int32 { return BytePAD }

// Name returns "byte".
func (*Byte) Name() string { return "byte" }
