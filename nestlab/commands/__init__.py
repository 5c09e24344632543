"""The subcommands of `nestlab`, a module each with register(subparsers): run and cleanup (run),
export, diagnose and variants (diagnose), accuracy, compare, plots, report and policies (tables), top."""
