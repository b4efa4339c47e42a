"""`openai:MODEL` and `hybrid:MODEL` agents over langchain-openai's ChatOpenAI.

Replies are parsed into `StageReply` (structured output); a reply that does not parse, has
no kernel or an inconsistent one is sent back with the problem stated, up to
`reply_attempts` times, and never raises out of the graph. Compile errors, mismatches and
timings reach the next round through the intra-stage attempt log in the prompt."""
from __future__ import annotations

import os
from pathlib import Path

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import ValidationError

from agents.protocol import Proposal, ProposedKernel, StageRequest
from agents.llm.prompts import SYSTEM, context_sections, render
from agents.llm.schema import KernelDraft, StageReply
from state import LLMConfig

LLMSettings = LLMConfig


def make_chat(model: str, cfg: LLMConfig):
    from langchain_openai import ChatOpenAI
    return ChatOpenAI(model=model, base_url=cfg.base_url or os.environ.get("OPENAI_BASE_URL"),
                      api_key=os.environ.get(cfg.api_key_env) or "not-set", temperature=cfg.temperature,
                      max_tokens=cfg.max_tokens, max_retries=cfg.max_retries, timeout=cfg.timeout_s)


def check_draft(k: KernelDraft) -> str:
    """'' when the draft is usable, else what is wrong with it (fed back to the model)."""
    if not k.kernel_names:
        return "kernel_names is empty"
    missing = [n for n in k.kernel_names if n not in k.cuda_source]
    if missing:
        return f"kernel(s) {missing} are not defined in cuda_source"
    if "class ModelNew" not in k.host_code:
        return "host_code defines no `class ModelNew`"
    try:
        compile(k.host_code, "<host_code>", "exec")
    except SyntaxError as exc:
        return f"host_code has a Python syntax error at line {exc.lineno}: {exc.msg}"
    return ""


class LLMAgent:
    def __init__(self, model: str, cfg: LLMConfig | None = None, chat=None, guard_policy: str = "strict"):
        self.model, self.cfg = model, cfg or LLMConfig()
        self.name = f"openai:{model}"
        self.chat = chat or make_chat(model, self.cfg)
        self.structured = self.chat.with_structured_output(StageReply, method="json_schema", include_raw=True)
        self.guard_policy = guard_policy
        self.prompts: list[str] = []  # what was sent, for inspection and tests

    def propose(self, req: StageRequest, guard_policy: str | None = None) -> Proposal:
        source = req.task.source or Path(req.task.path).read_text()
        feedback = ""
        for _ in range(self.cfg.reply_attempts):
            prompt = render(context_sections(req, source, self.cfg.context_chars, feedback=feedback))
            self.prompts.append(prompt)
            try:
                out = self.structured.invoke([SystemMessage(SYSTEM), HumanMessage(prompt)])
            except (ValidationError, OutputParserException, ValueError) as exc:
                # the SDK's own parse step raises on content that is not the schema's JSON
                out = {"parsed": None, "parsing_error": exc}
            except Exception as exc:  # the endpoint failed after the client's own retries: a run-level error
                return Proposal(error=f"LLM call failed ({self.cfg.base_url or os.environ.get('OPENAI_BASE_URL') or 'OpenAI'}): "
                                      f"{type(exc).__name__}: {str(exc)[:300]}")
            reply, err = out.get("parsed"), out.get("parsing_error")
            if err is not None or reply is None:
                feedback = f"It did not parse as JSON for the StageReply schema: {str(err)[:500]}"
                continue
            problems = [f"kernel {i}: {p}" for i, k in enumerate(reply.kernels) if (p := check_draft(k))]
            if not reply.kernels or problems:
                feedback = "; ".join(problems) or "It contained no kernel."
                continue
            kernels = [ProposedKernel(cuda_source=k.cuda_source, host_code=k.host_code, kernel_names=k.kernel_names,
                                      params=k.params, description=k.description, family="llm",
                                      guard_policy=guard_policy or self.guard_policy)
                       for k in reply.kernels[: req.max_candidates]]
            return Proposal(kernels=kernels, plan=reply.plan)
        return Proposal(plan=f"no usable LLM reply after {self.cfg.reply_attempts} attempts; last problem: {feedback}")


class HybridAgent:
    """The expert writes the first correct kernel where it covers the task; the LLM tunes, and
    designs the algorithm where the expert has no coverage (under the `mixed` guard policy)."""

    def __init__(self, llm: LLMAgent, expert=None):
        from agents.expert import ExpertAgent
        self.llm, self.expert = llm, expert or ExpertAgent()
        self.name = f"hybrid:{llm.model}"
        self._uncovered: set[str] = set()

    def propose(self, req: StageRequest) -> Proposal:
        if req.stage == "algorithm_design" and req.task.path not in self._uncovered:
            p = self.expert.propose(req)
            if not p.unsupported:
                return p
            self._uncovered.add(req.task.path)
        policy = "mixed" if req.task.path in self._uncovered else "strict"
        return self.llm.propose(req, guard_policy=policy)
