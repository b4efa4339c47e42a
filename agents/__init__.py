"""Who proposes kernels. Agents decide; they never launch kernels."""
from agents.base import Agent, Proposal, ProposedKernel, StageRequest, UnknownAgentError, make_agent

__all__ = ["Agent", "Proposal", "ProposedKernel", "StageRequest", "UnknownAgentError", "make_agent"]
