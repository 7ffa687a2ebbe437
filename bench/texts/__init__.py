"""Text sets packaged with the clients (callcenter_zh.tsv: id, class, text)."""
