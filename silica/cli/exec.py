"""``silica exec -- CMD ...``: run any command as a tool runs and show what a model would get."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from silica.cli.output import fail, print_json
from silica.cli.show import ImagesFlag


def exec_command(
    *command: Annotated[str, Parameter(allow_leading_hyphen=True)],
    shell: str | None = None,
    json_: Annotated[bool, Parameter(name="--json", negative="")] = False,
    provider: str | None = None,
    save_images: Path | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
    sandbox: Annotated[bool, Parameter(negative="")] = False,
    images: ImagesFlag = None,
):
    """Run a command as silica runs a tool and show what a model gets from its output.

    Put the command after '--' (it runs without a shell), or give a shell line with
    --shell. It gets the environment a tool gets (secrets withheld), no stdin, capped output
    and a timeout; nothing it starts outlives it. Exits with the command's own status
    (128+N for signal N, 124 when timed out, 127 not found, 126 cannot run).

    Parameters
    ----------
    command
        The command and its arguments, after '--', e.g. silica exec -- chafa -f kitty pic.png
    shell
        Run this line with /bin/sh -c instead, e.g. --shell "python plot.py | head".
    json_
        Print {"is_error", "content"} with blocks in the Anthropic tool_result form.
    provider
        Fit images to this provider's limits, as ``ask --provider`` does (any provider
        ``ask`` takes; default: the configured one).
    save_images
        Folder to save images to (default: the silica image folder).
    timeout
        Seconds before the command is stopped (default: [tools] timeout in config.toml).
    cwd
        Folder to run the command in (default: the current folder).
    sandbox
        Run it in the sandbox a tool gets: only the folder writable, credentials hidden, the
        network of [shell] network (none by default). Your own command runs unconfined
        without it.
    """
    import asyncio

    from silica.cli.show import images_setting, save_image, show_result
    from silica.cli.tools import toolbox
    from silica.tools.commands import NOT_EXECUTABLE, NOT_FOUND, run_command

    if bool(command) == (shell is not None):
        fail("give a command after '--' (silica exec -- ls -l) or a shell line "
             "(silica exec --shell 'ls | head'), one of the two", 2)
    if timeout is not None and not 0 < timeout <= 7 * 24 * 3600:
        fail(f"--timeout must be a number of seconds above 0, not {timeout:g}", 2)
    if save_images is not None and save_images.exists() and not save_images.is_dir():
        fail(f"--save-images {save_images} is a file, not a folder; give a folder to save "
             "the images in (it is created if it does not exist)", 2)
    folder = (cwd or Path.cwd()).resolve()
    if not folder.is_dir():
        fail(f"--cwd {cwd} is not a folder; give an existing folder to run the command in", 2)
    box = toolbox(provider)
    confined = None
    if sandbox:
        from silica.tools.shell import shell_sandbox

        confined = shell_sandbox(box.settings, folder, label="exec")
    run = asyncio.run(run_command(
        shell if shell is not None else list(command), cwd=folder,
        timeout=timeout or box.timeout, pm=box.pm, policy=box.options.env_policy,
        image_limits=box.image_limits, stdout_cap=box.stdout_cap, sandbox=confined))
    if run.status in (NOT_FOUND, NOT_EXECUTABLE) and run.raw.error:
        why = run.raw.error
        # The sandbox's refusal and the runner's start failure say what happened themselves.
        fail(why if why.startswith(("silica sandbox:", "could not")) else
             f"could not run {why}", run.status)
    if json_:
        print_json(run.result.to_anthropic())
    else:
        saved = [save_image(img, save_images) for img in run.result.images]
        show_result(run.result, saved, images_setting(images, box.settings))
    if run.status:
        raise SystemExit(run.status)
