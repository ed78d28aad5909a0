"""What pods ask for: resource quantities and each container's requests by HAMi's rules."""
