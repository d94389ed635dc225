//! The longest arguments of each NFSv4 operation.
