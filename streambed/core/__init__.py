"""What every layer uses: configuration, errors and the retry policy, names, LSNs,
logging, failpoints, and the change types the buffer hands the lake."""
