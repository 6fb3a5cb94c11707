"""The session subcommands, one module each (`<command>_cli`: flamegraph, trace, doctor,
attach, trap, sessions); what they share is in `common`, and they import nothing of each other."""
