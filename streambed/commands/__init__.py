"""The CLI's commands, one module each; `streambed.cli` parses and maps errors to exit codes."""
