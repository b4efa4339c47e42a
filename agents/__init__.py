"""Who proposes kernels. Agents decide; they never launch kernels."""
from agents.protocol import Agent, Proposal, ProposedKernel, StageRequest
from agents.registry import UnknownAgentError, make_agent

__all__ = ["Agent", "Proposal", "ProposedKernel", "StageRequest", "UnknownAgentError", "make_agent"]
