"""One module per page of the replay app; each is a Streamlit page script with a ``render(run)`` function."""
