"""The built-in providers: Anthropic, OpenAI (and compatible servers), Ollama."""

from silica.hookspecs import hookimpl


def _anthropic(settings):
    from silica.providers.anthropic import AnthropicProvider

    return AnthropicProvider(settings)


def _openai(settings):
    if settings.openai.api == "responses":  # [openai] api = "responses" in config
        return _openai_responses(settings)
    from silica.providers.openai import OpenAIProvider

    return OpenAIProvider(settings)


def _openai_responses(settings):
    from silica.providers.openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider(settings)


def _gemini(settings):
    from silica.providers.gemini import GeminiProvider

    return GeminiProvider(settings)


def _ollama(settings):
    from silica.providers.ollama import OllamaProvider

    return OllamaProvider(settings)


@hookimpl
def silica_providers(register) -> None:
    # imported on use: the CLI's tool commands need no SDK loaded
    register("anthropic", _anthropic)
    register("openai", _openai)
    register("openai-responses", _openai_responses)
    register("gemini", _gemini)
    register("ollama", _ollama)
