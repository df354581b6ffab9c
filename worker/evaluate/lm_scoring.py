"""Candidate scoring for causal LMs (a base model, or a base plus a `qlora` adapter), SPEC §7.

A row's prompt is rendered exactly as the trainer saw it (worker/corpus/messages.py through the
tokenizer's chat template). Each candidate's answer text (plus the end-of-turn token, so `trm`
and `trm+llm` are told apart) is scored by its summed log-likelihood after the prompt. No free
generation is needed, and a batch of rows costs one forward pass:

1. the part every prompt shares (the system prompt, the template's opening) goes through the
   model once per policy, and its keys/values are reused by every row;
2. each row is one sequence: the rest of its prompt, then its candidates' answer tokens as a
   tree (answers that start alike share those positions). A 4D attention mask lets a candidate
   see the prompt and its own earlier tokens only, and explicit positions place every candidate
   right after the prompt, so the prompt's keys/values are computed once and shared by its
   candidates (nothing is repeated per candidate);
3. rows of similar length are batched together (little padding), as many as fit ROWS_PER_BATCH
   and a bound on the batch's attention (rows x width^2 <= BATCH_CELLS: a few long prompts
   go alone, not sixteen at once); the output head runs only on the positions that predict an
   answer token.

An adapter trained with rows cut to `max_seq_len` (the trainer keeps a row's last tokens) is
scored on prompts cut the same way: a prompt longer than `max_seq_len` less its longest answer
keeps its last tokens, as the trainer saw such a row (the state's end, the candidates), rather
than a length it never trained on.

Token ids come from tokenizing the prompt once per row; an answer is tokenized once per policy,
after the prompt's last special token (a hard token boundary), so it splits exactly as in the
whole conversation the trainer tokenized. For the `json` contract the scored text is the
answer's opening `{"route":"<id>"`; `route_fields` then continues greedily after the chosen
route to read the router's other fields (reported separately from the route).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from core.settings import get_settings
from worker.context import StageFailure
from worker.corpus.messages import SYSTEM_PROMPTS, user_prompt
from worker.models import lm
from worker.models.base_model import BUILTIN
from worker.models.policy import Policy, files_hash

ROWS_PER_BATCH = 16
# rows x width^2 of a batch: 16 rows of 512 tokens; the attention's weights of a batch stay
# under ~0.6 GB whatever the prompts' lengths (a 7,000-token prompt goes alone).
BATCH_CELLS = 16 * 512 * 512
Encoded = tuple[list[int], list[list[int]]]  # (prompt ids, answer ids per candidate)


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
        max_seq_len: int | None = None,
        batch_cells: int = BATCH_CELLS,
    ) -> None:
        super().__init__()
        self.model, self.tokenizer, self.contract = model.eval(), tokenizer, contract
        self.name, self.model_hash, self.rows_per_batch = name, model_hash, rows_per_batch
        self.json_key, self.max_seq_len, self.batch_cells = json_key, max_seq_len, batch_cells
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.decoder, self.head = causal_lm.get_decoder(), causal_lm.get_output_embeddings()
        self.device = next(model.parameters()).device
        self.dtype = self.decoder.get_input_embeddings().weight.dtype
        # transformers 5 names the decoder's key/value cache argument `cache`; 4.x `past_key_values`
        params = inspect.signature(self.decoder.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.pad_id = tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = tokenizer.eos_token_id or 0
        self.specials = [t for t in tokenizer.all_special_tokens if t]
        self.end_id = self._end_of_turn_id()
        self._answers: dict[tuple[str, str], list[int]] = {}
        self._prefix: tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]] | None = None

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

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, state: str, tools: list[str]) -> Encoded:
        """(prompt ids, answer ids per candidate), tokenized as the trainer tokenized them."""
        prompt = self.prompt_text(state, tools)
        p_ids = self._ids(prompt)
        # Special tokens are never merged with their neighbours, so the text from the prompt's
        # last one on tokenizes the same alone as inside the whole conversation.
        cut = max((prompt.rfind(t) for t in self.specials), default=-1)
        tail = prompt[cut:] if cut >= 0 else prompt
        answers = [self._answer_ids(tail, tool) for tool in tools]
        if self.max_seq_len is not None:
            keep = max(1, self.max_seq_len - max(map(len, answers), default=0))
            p_ids = p_ids[-keep:]  # the trainer keeps a long row's last tokens
        return p_ids, answers

    def _answer_ids(self, tail: str, tool: str) -> list[int]:
        key = (tail, tool)
        if key not in self._answers:
            answer = self.answer_text(tool)
            t_ids, full = self._ids(tail), self._ids(tail + answer)
            # (a merge across the boundary: tokenize the answer on its own)
            a_ids = full[len(t_ids) :] if full[: len(t_ids)] == t_ids else self._ids(answer)
            if self.contract == "action_only" and self.end_id is not None:
                a_ids = [*a_ids, self.end_id]
            self._answers[key] = a_ids
        return self._answers[key]

    # ---- scoring -------------------------------------------------------------------------------
    @torch.no_grad()
    def scores_batch(self, states: Sequence[str], tools: Sequence[list[str]]) -> list[list[float]]:
        encoded = [self.encode(s, list(t)) for s, t in zip(states, tools, strict=True)]
        if not encoded:
            return []
        prefix = self._shared_prefix([p for p, _ in encoded])
        # Rows of similar length side by side: little padding in a batch.
        order = sorted(range(len(encoded)), key=lambda i: _length(encoded[i]))
        out: list[list[float]] = [[] for _ in encoded]
        for chunk in self._batches(order, [_length(e) - prefix for e in encoded]):
            scores = self._score_rows([encoded[i] for i in chunk], prefix)
            for i, row_scores in zip(chunk, scores, strict=True):
                out[i] = row_scores
        return out

    def _batches(self, order: list[int], widths: list[int]) -> list[list[int]]:
        """`order` (rows by length, shortest first) in batches of at most rows_per_batch rows and
        batch_cells rows x width^2 (width: the row joining, the batch's longest; one row alone
        whatever its length)."""
        batches: list[list[int]] = []
        for i in order:
            room = len(batches[-1]) + 1 if batches else self.rows_per_batch + 1
            if room > self.rows_per_batch or room * widths[i] * widths[i] > self.batch_cells:
                batches.append([i])
            else:
                batches[-1].append(i)
        return batches

    def _shared_prefix(self, prompts: list[list[int]]) -> int:
        """How many leading tokens every prompt shares with the policy's fixed prefix (the system
        prompt and the template's opening, through the model once per policy). At least one
        token of each prompt is left to run: its last position predicts the answer."""
        if self._prefix is None:
            ids = self._ids(self.prompt_text("", []))
            out = self.decoder(
                input_ids=torch.tensor([ids], device=self.device),
                position_ids=torch.arange(len(ids), device=self.device).unsqueeze(0),
                use_cache=True,
            )
            self.forward_passes += 1
            self._prefix = (ids, _key_values(getattr(out, self.cache_arg)))
        shared = self._prefix[0]
        n = min(len(shared), *(len(p) - 1 for p in prompts))
        for p in prompts:
            n = next((j for j in range(n) if p[j] != shared[j]), n)
        return n

    def _score_rows(self, encoded: list[Encoded], prefix: int) -> list[list[float]]:
        """One forward pass. A row is the rest of its prompt, then its candidates' answer tokens
        as a tree: answers that start alike (`TRM_ONLY`, `TRM_PLUS_LLM`) share the positions of
        their common start. A tree position sees the prompt, its ancestors and itself; it sits
        at the position the token would have right after the prompt. An answer's last token is
        only predicted, never an input."""
        rows = len(encoded)
        width = max(_length(e) - prefix for e in encoded)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        pos = torch.zeros((rows, width), dtype=torch.long)
        prompt_key = torch.zeros((rows, width), dtype=torch.bool)
        tree: list[tuple[int, int, int]] = []  # (row, query, key): an ancestor or itself
        needed: dict[tuple[int, int], int] = {}  # (row, position) -> index of its output
        at: list[int] = []  # per answer token: the output that predicts it, its id, its answer
        target: list[int] = []
        owner: list[int] = []
        answer_row: list[int] = []
        for r, (p_ids, answers) in enumerate(encoded):
            n = len(p_ids) - prefix
            ids[r, :n] = torch.tensor(p_ids[prefix:])
            pos[r, :n] = torch.arange(prefix, prefix + n)
            prompt_key[r, :n] = True
            nodes: dict[tuple[int, ...], tuple[int, list[int]]] = {}  # start -> (position, path)
            for a in answers:
                for t, token in enumerate(a):
                    if t == 0:
                        q = n - 1  # the prompt's last position predicts every first token
                    else:
                        start = tuple(a[:t])
                        if start not in nodes:
                            q = n + len(nodes)
                            path = [*(nodes[start[:-1]][1] if t > 1 else []), q]
                            nodes[start] = (q, path)
                            ids[r, q], pos[r, q] = a[t - 1], prefix + n + t - 1
                            tree += [(r, q, k) for k in path]
                        q = nodes[start][0]
                    at.append(needed.setdefault((r, q), len(needed)))
                    target.append(token)
                    owner.append(len(answer_row))
                answer_row.append(r)
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        allowed = (causal & prompt_key[:, None, :]) | torch.eye(width, dtype=torch.bool)
        if tree:
            r_idx, q_idx, k_idx = torch.tensor(tree).unbind(1)
            allowed[r_idx, q_idx, k_idx] = True
        mask = torch.zeros((rows, 1, width, prefix + width), dtype=self.dtype)
        mask[:, 0, :, prefix:].masked_fill_(~allowed, torch.finfo(self.dtype).min)
        kwargs: dict[str, Any] = {}
        if prefix and self._prefix is not None:
            kwargs[self.cache_arg] = _repeat_cache(self._prefix[1], prefix, rows)
        hidden = self.decoder(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=bool(prefix),
            **kwargs,
        ).last_hidden_state
        self.forward_passes += 1
        where = torch.tensor(list(needed))
        logp = torch.log_softmax(self.head(hidden[where[:, 0], where[:, 1]]).float(), -1)
        picked = logp[torch.tensor(at), torch.tensor(target)].cpu()
        totals = torch.zeros(len(answer_row)).index_add_(0, torch.tensor(owner), picked)
        out: list[list[float]] = [[] for _ in encoded]
        for j, r in enumerate(answer_row):
            out[r].append(float(totals[j]))
        return out

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


def _length(encoded: Encoded) -> int:
    """Tokens a row puts through the model: its prompt, and its candidates' answer tokens but the
    last, with the starts candidates share counted once."""
    p_ids, answers = encoded
    return len(p_ids) + len({tuple(a[:t]) for a in answers for t in range(1, len(a))})


def _key_values(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):  # transformers 5
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def _repeat_cache(key_values: list[tuple[torch.Tensor, torch.Tensor]], length: int, rows: int):
    """A fresh cache holding the first `length` prefix positions once per row (a causal model's
    keys/values of a prefix do not depend on what follows it; views: nothing is copied here)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer, (keys, values) in enumerate(key_values):
        k, v = keys[:, :, :length], values[:, :, :length]
        cache.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), layer)
    return cache


def load_lm_policy(ref: dict[str, Any]) -> LmPolicy:
    """A `qlora` adapter on its 4-bit base, or (`base_lm`) the bare base model, 4-bit too."""
    contract = ref.get("contract", "action_only")
    model_cache = Path(ref.get("model_cache") or get_settings().model_cache)
    if ref["type"] == "qlora":
        adapter = Path(ref["path"])
        weights = sorted(adapter.glob("adapter_model.*"))
        if not (adapter / lm.ADAPTER_CONFIG).is_file() or not weights:
            raise StageFailure(
                "dependency",
                f"no qlora adapter at {adapter} (adapter_config.json and adapter_model.* expected; "
                "a completed qlora train run leaves them in <run>/trainer/adapter/)",
            )
        model, tokenizer = lm.load_adapter(adapter, model_cache)
        trained = lm.trained_max_seq_len(adapter)
        cut = "" if trained is None else f":cut{trained}"  # the scores depend on the cut
        digest = files_hash(adapter / lm.ADAPTER_CONFIG, *weights, extra=contract + cut)
        return LmPolicy(model, tokenizer, contract, f"qlora:{adapter}", digest, max_seq_len=trained)
    model, tokenizer, base_dir = lm.load_base(ref.get("base_model") or BUILTIN, model_cache)
    weights = sorted(base_dir.glob("*.safetensors"))
    digest = files_hash(base_dir / "config.json", *weights, extra="base:" + contract)
    return LmPolicy(model, tokenizer, contract, f"base:{base_dir.name}", digest)
