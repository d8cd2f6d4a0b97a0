def greet(name):
    return f"hello, {name}, from a zipapp built in a sandbox pod"
