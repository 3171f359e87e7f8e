"""Pagoda's offline and streaming Python API, shaped like vLLM's:

    from pagoda import LLM, SamplingParams
    llm = LLM(model="models/stories260k")
    for out in llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=32)):
        print(out.outputs[0].text)
"""

from .async_llm import AsyncLLM
from .inputs import TextPrompt, TokensPrompt
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from .sampling_params import RequestOutputKind, SamplingParams
from .tokenizer import Tokenizer

__version__ = "0.1.0"
__all__ = ["AsyncLLM", "CompletionOutput", "LLM", "Logprob", "RequestMetrics", "RequestOutput",
           "RequestOutputKind", "SamplingParams", "TextPrompt", "TokensPrompt", "Tokenizer"]
