//! agentcomputer-shell
