"""Candidate scoring for causal LMs (a base model, or a base plus a `qlora` adapter), SPEC §7.

A row's prompt is rendered exactly as the trainer saw it (worker/corpus/messages.py through the
tokenizer's chat template). Each candidate's answer text (plus the end-of-turn token, so `trm`
and `trm+llm` are told apart) is scored by its summed log-likelihood after the prompt:

1. the prompts of a batch of rows go through the model once (left-padded, explicit positions),
   keeping their keys/values;
2. the cache is repeated once per candidate and every candidate of every row of the batch goes
   through the model in one forward pass; the output head runs only on the answer positions.

So a row costs one prompt pass shared by its candidates, and rows share passes in batches. No
free generation is needed. For the `json` contract the scored text is the answer's opening
`{"route":"<id>"`; `route_fields` then continues greedily after the chosen route to read the
router's other fields (reported separately from the route).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from worker.corpus.messages import SYSTEM_PROMPTS, user_prompt
from worker.evaluate.policies import Policy, files_hash

ROWS_PER_BATCH = 8


class LmPolicy(Policy):
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        contract: str,
        name: str,
        model_hash: str,
        rows_per_batch: int = ROWS_PER_BATCH,
        json_key: str = "route",
    ) -> None:
        super().__init__()
        self.model, self.tokenizer, self.contract = model.eval(), tokenizer, contract
        self.name, self.model_hash, self.rows_per_batch = name, model_hash, rows_per_batch
        self.json_key = json_key
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.decoder, self.head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
        self.device = next(model.parameters()).device
        self.pad_id = tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = tokenizer.eos_token_id or 0
        self.end_id = self._end_of_turn_id()

    # ---- text ----------------------------------------------------------------------------------
    def messages(self, state: str, tools: list[str]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPTS[self.contract]},
            {"role": "user", "content": user_prompt(state, tools)},
        ]

    def prompt_text(self, state: str, tools: list[str]) -> str:
        return self.tokenizer.apply_chat_template(
            self.messages(state, tools), tokenize=False, add_generation_prompt=True
        )

    def answer_text(self, tool: str) -> str:
        if self.contract == "action_only":
            return tool
        return "{" + json.dumps(self.json_key) + ":" + json.dumps(tool, ensure_ascii=False)

    def _end_of_turn_id(self) -> int | None:
        probe = [*self.messages("{}", ["x"]), {"role": "assistant", "content": "XYZZY"}]
        text = self.tokenizer.apply_chat_template(probe, tokenize=False)
        tail = text[text.rfind("XYZZY") + 5 :]
        ids = self.tokenizer(tail, add_special_tokens=False)["input_ids"] if tail else []
        if ids and ids[0] in set(self.tokenizer.all_special_ids):
            return int(ids[0])
        return self.tokenizer.eos_token_id

    def encode(self, state: str, tools: list[str]) -> tuple[list[int], list[list[int]]]:
        """(prompt ids, answer ids per candidate), tokenized as the trainer tokenized them."""
        prompt = self.prompt_text(state, tools)
        p_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answers = []
        for tool in tools:
            answer = self.answer_text(tool)
            full = self.tokenizer(prompt + answer, add_special_tokens=False)["input_ids"]
            if full[: len(p_ids)] == p_ids:
                a_ids = full[len(p_ids) :]
            else:  # a merge across the boundary: tokenize the answer on its own
                a_ids = self.tokenizer(answer, add_special_tokens=False)["input_ids"]
            if self.contract == "action_only" and self.end_id is not None:
                a_ids = [*a_ids, self.end_id]
            answers.append(a_ids)
        return p_ids, answers

    # ---- scoring -------------------------------------------------------------------------------
    @torch.no_grad()
    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(states), self.rows_per_batch):
            encoded = [
                self.encode(s, list(t))
                for s, t in zip(
                    states[start : start + self.rows_per_batch],
                    tools[start : start + self.rows_per_batch],
                    strict=True,
                )
            ]
            out.extend(self._score_encoded(encoded))
        return out

    def _score_encoded(self, encoded: list[tuple[list[int], list[list[int]]]]) -> list[list[float]]:
        dev = self.device
        rows = len(encoded)
        p_len = max(len(p) for p, _ in encoded)
        k = max(len(a) for _, a in encoded)
        c_len = max(len(c) for _, a in encoded for c in a)
        prompt = torch.full((rows, p_len), self.pad_id, dtype=torch.long)
        p_mask = torch.zeros((rows, p_len), dtype=torch.long)
        for i, (p, _) in enumerate(encoded):
            prompt[i, p_len - len(p) :] = torch.tensor(p)
            p_mask[i, p_len - len(p) :] = 1
        p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
        first = self.decoder(
            input_ids=prompt.to(dev),
            attention_mask=p_mask.to(dev),
            position_ids=p_pos.to(dev),
            use_cache=True,
        )
        self.forward_passes += 1
        last_logp = torch.log_softmax(self.head(first.last_hidden_state[:, -1]).float(), -1).cpu()
        cache = first.past_key_values
        cache.batch_repeat_interleave(k)
        cand = torch.full((rows * k, c_len), self.pad_id, dtype=torch.long)
        c_mask = torch.zeros((rows * k, c_len), dtype=torch.long)
        for i, (_, answers) in enumerate(encoded):
            for j, a in enumerate(answers):
                cand[i * k + j, : len(a)] = torch.tensor(a)
                c_mask[i * k + j, : len(a)] = 1
        lengths = p_mask.sum(-1).repeat_interleave(k)
        c_pos = lengths.unsqueeze(1) + torch.arange(c_len).unsqueeze(0)
        mask = torch.cat([p_mask.repeat_interleave(k, 0), c_mask], dim=1)
        second = self.decoder(
            input_ids=cand.to(dev),
            attention_mask=mask.to(dev),
            position_ids=c_pos.to(dev),
            past_key_values=cache,
            use_cache=True,
        )
        self.forward_passes += 1
        hidden = second.last_hidden_state  # [rows*k, c_len, h]: predicts tokens 1..c_len-1
        keep = c_mask[:, 1:].bool()
        logp_rest = torch.zeros((rows * k, max(c_len - 1, 0)))
        if c_len > 1 and keep.any():
            logits = self.head(hidden[:, :-1][keep.to(dev)]).float()
            targets = cand[:, 1:][keep].to(dev)
            picked = torch.log_softmax(logits, -1).gather(1, targets.unsqueeze(1)).squeeze(1)
            logp_rest[keep] = picked.cpu()
        first_tok = cand[:, 0]
        logp_first = last_logp.repeat_interleave(k, 0).gather(1, first_tok.unsqueeze(1)).squeeze(1)
        totals = logp_first + logp_rest.sum(-1)
        return [
            [float(totals[i * k + j]) for j in range(len(answers))]
            for i, (_, answers) in enumerate(encoded)
        ]

    # ---- generation (the slow reference, and the json contract's other fields) ----------------
    @torch.no_grad()
    def generate_pick(self, state: str, tools: list[str], max_new_tokens: int = 24) -> str | None:
        """Greedy free generation, then exact match against the candidates (None: no match)."""
        text = self._generate(self.prompt_text(state, tools), max_new_tokens)
        if self.contract == "action_only":
            answer = text.strip()
            return answer if answer in tools else None
        try:
            obj = json.loads(text.strip())
        except ValueError:
            return None
        route = obj.get("route", obj.get("action")) if isinstance(obj, dict) else None
        return route if route in tools else None

    @torch.no_grad()
    def route_fields(self, state: str, tools: list[str], route: str) -> dict[str, Any] | None:
        """`json` contract: the router object continued greedily after the chosen route."""
        prefix = self.answer_text(route)
        text = prefix + self._generate(self.prompt_text(state, tools) + prefix, 96)
        try:
            obj = json.loads(text.strip())
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def _generate(self, prompt: str, max_new_tokens: int) -> str:
        enc = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").to(self.device)
        out = self.model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=self.end_id,
            pad_token_id=self.pad_id,
        )
        self.forward_passes += int(out.shape[1] - enc["input_ids"].shape[1])
        return self.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def load_lm_policy(ref: dict[str, Any]) -> LmPolicy:
    """A `qlora` adapter on its 4-bit base, or (`base_lm`) the bare base model, 4-bit too."""
    from worker.train import qlora
    from worker.train.base_model import resolve_base_model

    contract = ref.get("contract", "action_only")
    model_cache = Path(ref.get("model_cache") or "models")
    if ref["type"] == "qlora":
        adapter = Path(ref["path"])
        weights = sorted(adapter.glob("adapter_model.*"))
        if not (adapter / "adapter_config.json").is_file() or not weights:
            from worker.context import StageFailure

            raise StageFailure(
                "dependency",
                f"no qlora adapter at {adapter} (adapter_config.json and adapter_model.* expected; "
                "a completed qlora train run leaves them in <run>/trainer/adapter/)",
            )
        model, tokenizer = qlora.load_adapter(adapter, model_cache)
        digest = files_hash(adapter / "adapter_config.json", *weights, extra=contract)
        return LmPolicy(model, tokenizer, contract, f"qlora:{adapter}", digest)
    from transformers import AutoTokenizer

    base_dir = resolve_base_model(ref.get("base_model") or "smollm2-135m-instruct", model_cache)
    device, dtype = qlora.device_and_dtype()
    model = qlora.load_4bit(base_dir, device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    weights = sorted(base_dir.glob("*.safetensors"))
    digest = files_hash(base_dir / "config.json", *weights, extra="base:" + contract)
    return LmPolicy(model, tokenizer, contract, f"base:{base_dir.name}", digest)
