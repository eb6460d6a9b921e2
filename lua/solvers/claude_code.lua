--- claude_code as a solver: declared in lua/solvers/shared/agents.lua (the table of installed agents).
return require('solvers.shared.agents').solver('claude_code')
