"""The node side: which annotations the plugin owes the node (pure) and the loop that writes
them."""
