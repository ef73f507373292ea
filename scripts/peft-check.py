"""peft-check.py: the PEFT side of stx's LoRA reference test (runtime/lora_peft_ref_test.go).

  peft-check.py score BASE ADAPTER TOKENS   log-probs of the token rows (JSON list of lists)
                                            under BASE with the PEFT adapter ADAPTER, as PEFT
                                            computes them: one JSON list per row, log p(t[i+1] | t[..i])
  peft-check.py make BASE OUT R ALPHA T,..  a LoRA adapter made by PEFT on BASE (targets T, rank R,
                                            alpha ALPHA; B drawn at random so that it changes the
                                            model), saved with save_pretrained into OUT; prints
                                            nothing
Everything runs in float64 on the CPU, so the comparison measures stx alone.
"""
import json
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

# transformers 4.40 builds its causal mask with torch.full in the default dtype from the
# model dtype's minimum: the default must be float64 too.
torch.set_default_dtype(torch.float64)


def base_model(path):
    m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float64)
    m.eval()
    return m


def score(base, adapter, tokens):
    model = PeftModel.from_pretrained(base_model(base), adapter).double()
    model.eval()
    out = []
    with torch.no_grad():
        for row in json.loads(tokens):
            ids = torch.tensor([row])
            logits = model(input_ids=ids).logits[0]
            lp = torch.log_softmax(logits, dim=-1)
            out.append([lp[i, row[i + 1]].item() for i in range(len(row) - 1)])
    print(json.dumps(out))


def make(base, out, r, alpha, targets):
    torch.manual_seed(0)
    cfg = LoraConfig(r=int(r), lora_alpha=float(alpha), target_modules=targets.split(","), lora_dropout=0.0,
                     task_type="CAUSAL_LM")
    model = get_peft_model(base_model(base), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    model = model.float()
    model.save_pretrained(out, safe_serialization=True)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "score" and len(sys.argv) == 5:
        score(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "make" and len(sys.argv) == 7:
        make(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
