"""Rendering: tables for the terminal and files, the HTML report page."""
