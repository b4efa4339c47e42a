"""LLM agents through langchain-openai: stage prompts from the principles, structured replies,
a context budget, and a hybrid mode where the expert seeds the first correct kernel."""
from agents.llm.agent import HybridAgent, LLMAgent, LLMSettings

__all__ = ["HybridAgent", "LLMAgent", "LLMSettings"]
