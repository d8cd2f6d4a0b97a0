//! agentcomputer-proto
