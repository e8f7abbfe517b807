"""kvscope's front ends: the CLI, the FastAPI dashboard and API, live mode and the emulator."""
