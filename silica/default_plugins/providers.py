"""The built-in providers: Anthropic, OpenAI (and compatible servers), Ollama."""

from silica.hookspecs import hookimpl


def _anthropic(settings):
    from silica.providers.anthropic import AnthropicProvider

    return AnthropicProvider(settings)


def _openai(settings):
    from silica.providers.openai import OpenAIProvider

    return OpenAIProvider(settings)


def _ollama(settings):
    from silica.providers.ollama import OllamaProvider

    return OllamaProvider(settings)


@hookimpl
def silica_providers(register) -> None:
    # imported on use: the CLI's tool commands need no SDK loaded
    register("anthropic", _anthropic)
    register("openai", _openai)
    register("ollama", _ollama)
